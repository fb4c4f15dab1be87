/* Data sets (IDX, CIFAR-10 binary, synthetic) and DistributedSampler. */
#ifndef CNN_DATA_H
#define CNN_DATA_H

#include <stddef.h>
#include <stdint.h>

#define CNN_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

struct cnn_dataset {
	int n, c, h, w, classes;
	uint8_t *x;            /* n x c x h x w bytes, as stored */
	uint8_t *y;            /* n labels */
	float mean[4], std[4]; /* per channel, of the training set, in [0,1] units */
};

/* kind: "idx" (MNIST / Fashion-MNIST files train-images-idx3-ubyte[.gz]
 * and friends), "cifar10" (data_batch_1..5.bin, test_batch.bin) or
 * "synthetic" (a learnable random set of 1x28x28 images, no files).
 * Fills train and test; the test set gets the training set's mean/std. */
int cnn_data_load(const char *kind, const char *dir, struct cnn_dataset *train,
		  struct cnn_dataset *test, char *err, size_t errlen);
void cnn_data_free(struct cnn_dataset *d);

/* Read one IDX file (gzip or plain) of unsigned bytes; dims gets up to 4
 * sizes.  Exposed for the tests. */
int cnn_idx_read(const char *path, uint8_t **data, int *ndim, uint32_t dims[4],
		 char *err, size_t errlen);

/* Normalized float images and labels for the given sample indices. */
void cnn_data_gather(const struct cnn_dataset *d, const uint32_t *idx, int n,
		     float *x, uint8_t *y);

/* torch.utils.data.DistributedSampler: each epoch a permutation drawn from
 * (seed, epoch), the same on every rank, padded by wrapping around so that
 * every rank gets ceil(n / world) samples, rank r taking r, r+world, ... */
struct cnn_sampler {
	uint32_t n, world, rank, per_rank;
	uint64_t seed;
	int shuffle;
	uint32_t *perm, *mine;
};

int cnn_sampler_init(struct cnn_sampler *s, uint32_t n, uint32_t world, uint32_t rank,
		     uint64_t seed, int shuffle);
void cnn_sampler_epoch(struct cnn_sampler *s, uint32_t epoch);
void cnn_sampler_free(struct cnn_sampler *s);

#endif
