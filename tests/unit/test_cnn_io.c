/* cnn_train's inputs and outputs: IDX files good and bad, the distributed
 * sampler's semantics, checkpoints, the command line. */
#include <stdarg.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "args.h"
#include "ckpt.h"
#include "data.h"
#include "gpu.h"
#include "model.h"
#include "optim.h"
#include "test.h"

static char dir[] = "/tmp/cnn-io-XXXXXX";

static void write_file(const char *name, const void *p, size_t n, int gz)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (gz) {
		gzFile f = gzopen(path, "wb");
		gzwrite(f, p, (unsigned)n);
		gzclose(f);
	} else {
		FILE *f = fopen(path, "wb");
		fwrite(p, 1, n, f);
		fclose(f);
	}
}

/* An IDX file of n images r x c (or labels when r == 0). */
static size_t idx(uint8_t *buf, uint32_t n, uint32_t r, uint32_t c, int magic_ok)
{
	size_t off = 0;
	buf[off++] = 0;
	buf[off++] = 0;
	buf[off++] = magic_ok ? 8 : 9;
	buf[off++] = r ? 3 : 1;
	uint32_t dims[3] = { n, r, c };
	for (int d = 0; d < (r ? 3 : 1); d++) {
		buf[off++] = dims[d] >> 24;
		buf[off++] = dims[d] >> 16;
		buf[off++] = dims[d] >> 8;
		buf[off++] = dims[d];
	}
	size_t body = (size_t)n * (r ? r * c : 1);
	for (size_t i = 0; i < body; i++)
		buf[off + i] = (uint8_t)(r ? i * 7 : i % 10);
	return off + body;
}

static void test_idx(void)
{
	static uint8_t img[16 + 20 * 8 * 8], lab[8 + 20];
	struct cnn_dataset tr, te;
	char err[512];
	size_t ni = idx(img, 20, 8, 8, 1), nl = idx(lab, 20, 0, 0, 1);

	test_cond("missing files are named",
		  cnn_data_load("idx", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... with the path", err, "train-images-idx3-ubyte: No such file");

	write_file("train-images-idx3-ubyte.gz", img, ni, 1);
	write_file("train-labels-idx1-ubyte", lab, nl, 0);
	write_file("t10k-images-idx3-ubyte", img, ni, 0);
	write_file("t10k-labels-idx1-ubyte.gz", lab, nl, 1);
	test_cond("gzip and plain IDX files load", cnn_data_load("idx", dir, &tr, &te, err, sizeof(err)) == 0);
	test_cond("... 20 images of 1x8x8, 10 classes",
		  tr.n == 20 && tr.c == 1 && tr.h == 8 && tr.w == 8 && tr.classes == 10 && te.n == 20);
	test_cond("... the bytes as written", tr.x[9] == 63 && tr.y[13] == 3);
	test_cond("... with a standard deviation", tr.std[0] > 0 && te.mean[0] == tr.mean[0]);
	cnn_data_free(&tr);
	cnn_data_free(&te);

	write_file("t10k-images-idx3-ubyte", img, ni - 5, 0);
	test_cond("a truncated file", cnn_data_load("idx", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... is called truncated", err, "t10k-images-idx3-ubyte: truncated");
	size_t nbad = idx(img, 20, 8, 8, 0);
	write_file("t10k-images-idx3-ubyte", img, nbad, 0);
	test_cond("a bad magic number", cnn_data_load("idx", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... is named", err, "bad magic 00000903");
	ni = idx(img, 19, 8, 8, 1);
	write_file("t10k-images-idx3-ubyte", img, ni, 0);
	test_cond("19 images with 20 labels", cnn_data_load("idx", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... is a count mismatch", err, "has 20 labels but");
	write_file("t10k-images-idx3-ubyte", "", 0, 0);
	test_cond("an empty file", cnn_data_load("idx", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... is truncated", err, "truncated: 0 of 4 bytes");
	char sub[300];
	snprintf(sub, sizeof(sub), "%s/t10k-images-idx3-ubyte", dir);
	unlink(sub);
	mkdir(sub, 0755);
	test_cond("a directory where a file should be", cnn_data_load("idx", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... says so", err, "not a regular file");
	rmdir(sub);
	test_cond("cifar10 without files", cnn_data_load("cifar10", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... names the first", err, "data_batch_1.bin: No such file");
	snprintf(sub, sizeof(sub), "%s/data_batch_1.bin", dir);
	mkdir(sub, 0755);
	errno = EINTR; /* a stale errno must not be the reason */
	test_cond("cifar10: a directory where a batch should be", cnn_data_load("cifar10", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... says so", err, "data_batch_1.bin: not a regular file");
	rmdir(sub);
	/* CIFAR-10 binary batches: label byte + 3072 pixel bytes per record */
	static uint8_t rec[3 * 3073];
	for (int i = 0; i < 3; i++) {
		rec[i * 3073] = (uint8_t)(i + 7);
		memset(rec + i * 3073 + 1, 40 * i, 3072);
	}
	const char *batches[] = { "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
				  "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin" };
	for (int f = 0; f < 6; f++)
		write_file(batches[f], rec, sizeof(rec), 0);
	test_cond("CIFAR-10 batches load", cnn_data_load("cifar10", dir, &tr, &te, err, sizeof(err)) == 0);
	test_cond("... 5 x 3 training and 3 test images of 3x32x32, 10 classes",
		  tr.n == 15 && te.n == 3 && tr.c == 3 && tr.h == 32 && tr.w == 32 && tr.classes == 10 &&
		  tr.y[4] == 8 && tr.x[3072 * 2] == 80);
	cnn_data_free(&tr);
	cnn_data_free(&te);
	write_file("test_batch.bin", rec, 3073 + 100, 0);
	test_cond("a CIFAR-10 batch cut mid-record", cnn_data_load("cifar10", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... is named", err, "test_batch.bin: 3173 bytes is not a whole number of 3073-byte records");
	rec[0] = 12;
	write_file("test_batch.bin", rec, sizeof(rec), 0);
	test_cond("a CIFAR-10 label of 12", cnn_data_load("cifar10", dir, &tr, &te, err, sizeof(err)) < 0);
	test_err("... is named", err, "record 0 has label 12 (expected 0..9)");
	test_cond("synthetic needs no files", cnn_data_load("synthetic", dir, &tr, &te, err, sizeof(err)) == 0 &&
		  tr.n == 60000 && te.n == 10000 && tr.classes == 10);
	cnn_data_free(&tr);
	cnn_data_free(&te);
}

static void test_sampler(void)
{
	enum { N = 10, W = 3 };
	struct cnn_sampler s[W];
	int seen[N] = { 0 }, total = 0, same_perm = 1;
	for (int r = 0; r < W; r++) {
		cnn_sampler_init(&s[r], N, W, r, 5, 1);
		cnn_sampler_epoch(&s[r], 2);
	}
	for (int r = 0; r < W; r++) {
		for (uint32_t j = 0; j < s[r].per_rank; j++, total++)
			seen[s[r].mine[j]]++;
		same_perm &= memcmp(s[r].perm, s[0].perm, sizeof(uint32_t) * N) == 0;
	}
	int all = 1, twice = 0;
	for (int i = 0; i < N; i++) {
		all &= seen[i] >= 1;
		twice += seen[i] == 2;
	}
	test_cond("every rank gets ceil(10/3) = 4 samples", s[0].per_rank == 4 && total == 12);
	test_cond("the same permutation on every rank", same_perm);
	test_cond("all samples covered, the 2 of padding wrap around", all && twice == 2);
	test_cond("rank r takes r, r+world, ...", s[1].mine[1] == s[1].perm[4] && s[2].mine[0] == s[2].perm[2]);
	uint32_t before[N];
	memcpy(before, s[0].perm, sizeof(before));
	cnn_sampler_epoch(&s[0], 3);
	test_cond("another epoch, another order", memcmp(before, s[0].perm, sizeof(before)) != 0);
	cnn_sampler_epoch(&s[0], 2);
	test_cond("the same epoch, the same order (resume)", memcmp(before, s[0].perm, sizeof(before)) == 0);
	for (int r = 0; r < W; r++)
		cnn_sampler_free(&s[r]);
	struct cnn_sampler z;
	test_cond("an empty set, or a rank past the world, is refused",
		  cnn_sampler_init(&z, 0, W, 0, 5, 1) < 0 && cnn_sampler_init(&z, N, W, W, 5, 1) < 0);
	cnn_sampler_epoch(&z, 1); /* refused: no order to make, nothing written */
	test_cond("... and its epoch orders nothing", z.n == 0 && !z.perm && !z.mine);
}

/* A checkpoint resumed by a run of another world size or batch: the same
 * place in the epoch's order.  The model it rests on, checked here with
 * the sampler itself: a run's first k steps, over all its ranks, cover the
 * first k x batch x world positions of the epoch's order. */
static void test_resume_at(void)
{
	struct cnn_ckpt_pos same = { 1, 17, 57, 9, 4, 64 };
	long long b, g;
	cnn_ckpt_resume_at(&same, 10000, 4, 64, &b, &g);
	test_cond("the same world and batch: the checkpoint's own step and count", b == 17 && g == 57);
	struct cnn_ckpt_pos old = { 1, 17, 57, 9, 0, 0 };
	cnn_ckpt_resume_at(&old, 10000, 2, 32, &b, &g);
	test_cond("a checkpoint that recorded no world or batch: as it is", b == 17 && g == 57);
	struct cnn_ckpt_pos p = { 1, 10, 50, 9, 1, 32 };
	cnn_ckpt_resume_at(&p, 1280, 1, 64, &b, &g);
	test_cond("batch 32 to 64: step 10 (320 images) is step 5, 25 steps done (20 an epoch)",
		  b == 5 && g == 25);
	p = (struct cnn_ckpt_pos){ 0, 7, 7, 9, 2, 64 };
	cnn_ckpt_resume_at(&p, 1000, 4, 64, &b, &g);
	test_cond("2 ranks to 4: 896 positions seen, step 3 (768) of 4, half a step again", b == 3 && g == 3);

	/* every change of world and batch, against the sampler's own cover */
	enum { N = 203 };
	int bad = 0, checked = 0;
	uint8_t covered[N];
	for (int w0 = 1; w0 <= 4; w0++)
		for (int b0 = 1; b0 <= 40; b0 += 13)
			for (int w1 = 1; w1 <= 4; w1++)
				for (int b1 = 1; b1 <= 40; b1 += 7) {
					struct cnn_sampler s;
					long long per0 = (N + w0 - 1) / w0, nb0 = (per0 + b0 - 1) / b0;
					for (long long k = 0; k < nb0; k++) {
						/* the positions the old run's first k steps covered */
						memset(covered, 0, sizeof(covered));
						uint32_t perm[N];
						for (int r = 0; r < w0; r++) {
							cnn_sampler_init(&s, N, (uint32_t)w0, (uint32_t)r, 5, 1);
							cnn_sampler_epoch(&s, 0);
							memcpy(perm, s.perm, sizeof(perm));
							for (long long j = 0; j < k * b0 && j < (long long)s.per_rank; j++)
								for (int q = 0; q < N; q++)
									if (perm[q] == s.mine[j])
										covered[q] = 1;
							cnn_sampler_free(&s);
						}
						long long seen = (k * b0 < per0 ? k * b0 : per0) * w0;
						for (long long q = 0; q < N; q++)
							bad += covered[q] != (q < seen);
						p = (struct cnn_ckpt_pos){ 2, k, 0, 5, w0, b0 };
						cnn_ckpt_resume_at(&p, N, w1, b1, &b, &g);
						long long per1 = (N + w1 - 1) / w1, nb1 = (per1 + b1 - 1) / b1;
						long long from = b * b1 * w1;
						/* nothing skipped, at most a step again, the count
						 * (unchanged where nothing changed: pos's own, 0) */
						bad += from > seen || (seen - from >= (long long)b1 * w1 && b < nb1) ||
						       g != (w0 == w1 && b0 == b1 ? 0 : 2 * nb1 + b);
						checked++;
					}
				}
	test_cond("every world and batch change: no position skipped, at most one step's again, the "
		  "steps counted in the new run's steps", bad == 0);
	printf("#   %d resumes checked\n", checked);
}

static void test_ckpt(void)
{
	struct cnn_model m, m2;
	struct cnn_optim o = { .lr = 0.1f, .momentum = 0.9f }, o2 = o, oa = o;
	char err[512], ck[300];
	struct cnn_shape sh = { 1, 28, 28, 10 }, cif = { 3, 32, 32, 10 };
	snprintf(ck, sizeof(ck), "%s/ck", dir);
	cnn_model_init(&m, sh, err, sizeof(err));
	cnn_model_init(&m2, sh, err, sizeof(err));
	cnn_model_init_params(&m, 3);
	cnn_optim_init(&o, CNN_SGD, m.nparams);
	cnn_optim_init(&o2, CNN_SGD, m.nparams);
	for (size_t i = 0; i < m.nparams; i++)
		m.grads[i] = 0.01f;
	cnn_optim_step(&o, m.params, m.grads, 0.1f);
	struct cnn_ckpt_pos pos = { 1, 17, 486, 9, 4, 64 }, back;
	test_cond("no checkpoint yet is not an error", cnn_ckpt_load(ck, &m2, &o2, &back, err, sizeof(err)) == 0);
	test_cond("save", cnn_ckpt_save(ck, &m, &o, &pos, err, sizeof(err)) == 0);
	test_cond("load", cnn_ckpt_load(ck, &m2, &o2, &back, err, sizeof(err)) == 1);
	test_cond("... parameters and momentum come back",
		  memcmp(m.params, m2.params, m.nparams * 4) == 0 && memcmp(o.s1, o2.s1, m.nparams * 4) == 0 &&
		  o2.updates == 1);
	test_cond("... and the place in the run", back.epoch == 1 && back.step_in_epoch == 17 &&
		  back.global_step == 486 && back.seed == 9);
	struct cnn_model mc;
	struct cnn_optim oc = { .lr = 0.1f };
	cnn_model_init(&mc, cif, err, sizeof(err));
	cnn_optim_init(&oc, CNN_SGD, mc.nparams);
	test_cond("a checkpoint of another model shape is refused",
		  cnn_ckpt_load(ck, &mc, &oc, &back, err, sizeof(err)) < 0);
	test_err("... saying both shapes", err, "is for a 1x28x28->10 model");
	test_err("... ", err, "this run's model is 3x32x32->10");
	cnn_optim_init(&oa, CNN_ADADELTA, m.nparams);
	test_cond("a checkpoint of another optimizer is refused",
		  cnn_ckpt_load(ck, &m2, &oa, &back, err, sizeof(err)) < 0);
	test_err("... naming both", err, "written with the sgd optimizer, this run uses adadelta");
	char path[400];
	snprintf(path, sizeof(path), "%s/checkpoint.bin", ck);
	FILE *f = fopen(path, "r+b");
	fseek(f, 5000, SEEK_SET);
	fputc(0x55, f);
	fclose(f);
	test_cond("a corrupted checkpoint is refused", cnn_ckpt_load(ck, &m2, &o2, &back, err, sizeof(err)) < 0);
	test_err("... by its CRC", err, "CRC mismatch");
	/* saved again over it: the new one whole, no temporary file left */
	test_cond("a second save replaces it", cnn_ckpt_save(ck, &m, &o, &pos, err, sizeof(err)) == 0 &&
		  cnn_ckpt_load(ck, &m2, &o2, &back, err, sizeof(err)) == 1);
	DIR *dd = opendir(ck);
	int entries = 0;
	for (struct dirent *e; dd && (e = readdir(dd));)
		entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	if (dd)
		closedir(dd);
	test_cond("... and leaves checkpoint.bin alone in the directory", entries == 1);
	/* a --checkpoint-dir that names a file (a link moved to one mid-run) */
	char notdir[400];
	snprintf(notdir, sizeof(notdir), "%s/plainfile", dir);
	FILE *pf = fopen(notdir, "w");
	if (pf)
		fclose(pf);
	test_cond("a checkpoint dir that is a file is refused",
		  cnn_ckpt_save(notdir, &m, &o, &pos, err, sizeof(err)) < 0);
	char want[500];
	snprintf(want, sizeof(want), "checkpoint dir %s: Not a directory", notdir);
	test_err("... naming it", err, want);
	cnn_model_free(&m);
	cnn_model_free(&m2);
	cnn_model_free(&mc);
	cnn_optim_free(&o);
	cnn_optim_free(&o2);
	cnn_optim_free(&oa);
	cnn_optim_free(&oc);
}

static int parse(struct cnn_args *a, char *err, const char *omp, ...)
{
	char *argv[16] = { "cnn_train" };
	int argc = 1;
	va_list ap;
	va_start(ap, omp);
	for (char *s; argc < 15 && (s = va_arg(ap, char *));)
		argv[argc++] = s;
	va_end(ap);
	return cnn_args_parse(a, argc, argv, NULL, omp, err, 512);
}

static void test_args(void)
{
	struct cnn_args a;
	char err[512];
	test_cond("defaults", parse(&a, err, NULL, NULL) == 0 && a.batch == 64 && a.epochs == 2 &&
		  a.optim == CNN_SGD && a.lr == 0.05f && a.threads == 1 &&
		  strcmp(a.data_dir, CNN_DEFAULT_DATA_DIR) == 0);
	test_cond("OMP_NUM_THREADS gives the threads", parse(&a, err, "2", NULL) == 0 && a.threads == 2);
	test_cond("--threads wins over it", parse(&a, err, "2", "--threads", "3", NULL) == 0 && a.threads == 3);
	test_cond("adadelta: lr 1.0 and the step schedule",
		  parse(&a, err, NULL, "--optimizer", "adadelta", NULL) == 0 && a.lr == 1.0f &&
		  a.sched.kind == CNN_SCHED_STEP);
	test_cond("--batch-size=0", parse(&a, err, NULL, "--batch-size=0", NULL) < 0);
	test_err("... says what was expected", err, "--batch-size=0: expected an integer from 1 to 65536");
	test_cond("--lr=fast", parse(&a, err, NULL, "--lr=fast", NULL) < 0);
	test_err("... is not a number", err, "--lr=fast: expected a number");
	test_cond("--optimizer=adam", parse(&a, err, NULL, "--optimizer=adam", NULL) < 0);
	test_err("... lists the choices", err, "expected sgd or adadelta");
	test_cond("--frobnicate", parse(&a, err, NULL, "--frobnicate", NULL) < 0);
	test_err("... is unknown", err, "--frobnicate: unknown option");
	test_cond("--epochs without a value", parse(&a, err, NULL, "--epochs", NULL) < 0);
	test_err("... needs one", err, "--epochs: needs a value");
	test_cond("--resume without --checkpoint-dir", parse(&a, err, NULL, "--resume", NULL) < 0);
	test_cond("a stray argument", parse(&a, err, NULL, "train.py", NULL) < 0);
	test_err("... is named", err, "train.py: unexpected argument");
	test_cond("OMP_NUM_THREADS=lots", parse(&a, err, "lots", NULL) < 0);
	test_err("... is named", err, "OMP_NUM_THREADS=lots");
	test_cond("GPU defaults: auto device, TF32, graph",
		  parse(&a, err, NULL, NULL) == 0 && strcmp(a.device, "auto") == 0 && a.precision == CNN_PREC_TF32 &&
		  a.no_graph == 0);
	test_cond("--precision fp32 --no-graph --device cuda",
		  parse(&a, err, NULL, "--precision", "fp32", "--no-graph", "--device=cuda", NULL) == 0 &&
		  a.precision == CNN_PREC_FP32 && a.no_graph == 1 && strcmp(a.device, "cuda") == 0);
	test_cond("--precision bf16", parse(&a, err, NULL, "--precision", "bf16", NULL) == 0 &&
		  a.precision == CNN_PREC_BF16);
	test_cond("--conv-layout: auto by default, nchw and nhwc",
		  parse(&a, err, NULL, NULL) == 0 && a.conv_layout == CNN_LAYOUT_AUTO &&
		  parse(&a, err, NULL, "--conv-layout", "nhwc", NULL) == 0 && a.conv_layout == CNN_LAYOUT_NHWC &&
		  parse(&a, err, NULL, "--conv-layout=nchw", NULL) == 0 && a.conv_layout == CNN_LAYOUT_NCHW);
	test_cond("--conv-layout=chwn", parse(&a, err, NULL, "--conv-layout=chwn", NULL) < 0);
	test_err("... lists the choices", err, "--conv-layout=chwn: expected nchw, nhwc or auto");
	test_cond("--backward-streams: auto by default, 1, 2",
		  parse(&a, err, NULL, NULL) == 0 && a.streams == CNN_STREAMS_AUTO &&
		  parse(&a, err, NULL, "--backward-streams", "2", NULL) == 0 && a.streams == 2 &&
		  parse(&a, err, NULL, "--backward-streams=1", NULL) == 0 && a.streams == 1 &&
		  parse(&a, err, NULL, "--backward-streams=auto", NULL) == 0 &&
		  a.streams == CNN_STREAMS_AUTO);
	test_cond("--backward-streams=3", parse(&a, err, NULL, "--backward-streams=3", NULL) < 0);
	test_err("... names what it takes", err, "--backward-streams=3: expected 1, 2 or auto");
	test_cond("--cuda-profile-steps: none by default, 10:12",
		  parse(&a, err, NULL, NULL) == 0 && a.profile_from == 0 && a.profile_to == 0 &&
		  parse(&a, err, NULL, "--cuda-profile-steps", "10:12", NULL) == 0 &&
		  a.profile_from == 10 && a.profile_to == 12 &&
		  parse(&a, err, NULL, "--cuda-profile-steps=5:5", NULL) == 0 && a.profile_to == 5);
	test_cond("--cuda-profile-steps=12:10", parse(&a, err, NULL, "--cuda-profile-steps=12:10", NULL) < 0);
	test_err("... names the last step and its bound", err, "--cuda-profile-steps' last step=10: expected an integer from 12");
	test_cond("--cuda-profile-steps=10", parse(&a, err, NULL, "--cuda-profile-steps=10", NULL) < 0);
	test_err("... names the form", err, "--cuda-profile-steps=10: expected FIRST:LAST, such as 10:12");
	test_cond("--cuda-profile-steps=0:3", parse(&a, err, NULL, "--cuda-profile-steps=0:3", NULL) < 0);
	test_err("... steps count from 1", err, "--cuda-profile-steps' first step=0: expected an integer from 1");
	test_cond("--conv1: auto by default, cudnn and direct",
		  parse(&a, err, NULL, NULL) == 0 && a.conv1 == CNN_CONV_AUTO &&
		  parse(&a, err, NULL, "--conv1", "cudnn", NULL) == 0 && a.conv1 == CNN_CONV_CUDNN &&
		  parse(&a, err, NULL, "--conv1=direct", NULL) == 0 && a.conv1 == CNN_CONV_DIRECT);
	test_cond("--conv1=winograd", parse(&a, err, NULL, "--conv1=winograd", NULL) < 0);
	test_err("... lists the choices", err, "--conv1=winograd: expected auto, cudnn or direct");
	test_cond("--conv2: auto by default, cudnn and direct",
		  parse(&a, err, NULL, NULL) == 0 && a.conv2 == CNN_CONV_AUTO &&
		  parse(&a, err, NULL, "--conv2", "cudnn", NULL) == 0 && a.conv2 == CNN_CONV_CUDNN &&
		  parse(&a, err, NULL, "--conv2=direct", NULL) == 0 && a.conv2 == CNN_CONV_DIRECT);
	test_cond("--conv2=fft", parse(&a, err, NULL, "--conv2=fft", NULL) < 0);
	test_err("... lists the choices", err, "--conv2=fft: expected auto, cudnn or direct");
	test_cond("--fc2: auto by default, cublas and fused",
		  parse(&a, err, NULL, NULL) == 0 && a.fc2 == CNN_FC2_AUTO &&
		  parse(&a, err, NULL, "--fc2", "cublas", NULL) == 0 && a.fc2 == CNN_FC2_CUBLAS &&
		  parse(&a, err, NULL, "--fc2=fused", NULL) == 0 && a.fc2 == CNN_FC2_FUSED);
	test_cond("--fc2=gemm", parse(&a, err, NULL, "--fc2=gemm", NULL) < 0);
	test_err("... lists the choices", err, "--fc2=gemm: expected cublas, fused or auto");
	test_cond("--precision=fp8", parse(&a, err, NULL, "--precision=fp8", NULL) < 0);
	test_err("... lists the choices", err, "--precision=fp8: expected tf32, fp32 or bf16");
	test_cond("--device=tpu", parse(&a, err, NULL, "--device=tpu", NULL) < 0);
	test_err("... lists the choices", err, "--device=tpu: expected cpu, cuda or auto");
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_idx();
	test_sampler();
	test_ckpt();
	test_resume_at();
	test_args();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
	return test_report();
}
