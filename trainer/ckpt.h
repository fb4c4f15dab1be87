/* Checkpoints: model, optimizer state, position in the run and RNG seed,
 * written atomically (temp file, fsync, rename, fsync of the directory)
 * with a CRC over the whole file. */
#ifndef CNN_CKPT_H
#define CNN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"

#define CNN_CKPT_NAME "checkpoint.bin"

struct cnn_ckpt_pos {
	int32_t epoch;          /* epoch to continue in */
	int64_t step_in_epoch;  /* batches of that epoch already done */
	int64_t global_step;    /* optimizer steps so far (also the RNG counter) */
	uint64_t seed;
	int32_t world, batch;   /* of the run that wrote it (informational) */
};

/* Where a run of world ranks of batch images each, over a training set
 * of n, resumes the epoch pos stopped in: its first step_in_epoch steps
 * covered the epoch's first step_in_epoch x batch x world positions of
 * the shuffled order (each rank's share strided over it, the last share
 * padded as the sampler pads), and a step of this run covers batch x
 * world, so it resumes at the step whose start has seen no position the
 * checkpoint's run had not: no image skipped, at most one step's seen
 * again.  The same world and batch: pos's own step.  *global is the
 * optimizer steps this run would have done by then (the schedule's
 * clock): pos's own where nothing changed.  pos->world or batch 0 (not
 * recorded): pos as it is. */
void cnn_ckpt_resume_at(const struct cnn_ckpt_pos *pos, uint32_t n, int world, int batch,
			long long *step_in_epoch, long long *global);

/* Write dir/checkpoint.bin atomically. */
int cnn_ckpt_save(const char *dir, const struct cnn_model *m, const struct cnn_optim *o,
		  const struct cnn_ckpt_pos *pos, char *err, size_t errlen);
/* Load dir/checkpoint.bin into m and o (shapes must match).  Returns 1
 * when loaded, 0 when there is no checkpoint, -1 on error. */
int cnn_ckpt_load(const char *dir, struct cnn_model *m, struct cnn_optim *o,
		  struct cnn_ckpt_pos *pos, char *err, size_t errlen);

#endif
