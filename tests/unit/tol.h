/* Tolerance tables for the numeric tests (llm.c style): each test file
 * has one table of {what, atol, rtol, why}; a value passes when
 * |got - ref| <= atol + rtol * |ref|, and the first mismatches are printed
 * with the reason of their tolerance.  A file defines its table `tols`
 * and then uses check() and checkf(). */
#ifndef DDP_TEST_TOL_H
#define DDP_TEST_TOL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tol {
	const char *what;
	double atol, rtol;
	const char *why;
};

static inline const struct tol *tol_find(const struct tol *tab, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(tab[i].what, what) == 0)
			return &tab[i];
	fprintf(stderr, "no tolerance '%s' in the table\n", what);
	exit(2);
}

/* Compare arrays (got may be float or double: one of gotf/gotd is NULL);
 * print the first mismatches; return their count. */
static inline int tol_check(const struct tol *t, const char *name, const float *gotf,
			    const double *gotd, const double *refd, const float *reff, size_t n)
{
	int bad = 0;
	double worst = 0;
	size_t wi = 0;
	for (size_t i = 0; i < n; i++) {
		double g = gotf ? (double)gotf[i] : gotd[i], r = reff ? (double)reff[i] : refd[i];
		double lim = t->atol + t->rtol * fabs(r);
		if (lim > 0 && fabs(g - r) / lim > worst) {
			worst = fabs(g - r) / lim;
			wi = i;
		}
		if (!(fabs(g - r) <= lim)) {
			if (bad < 4)
				printf("#   %s %s[%zu]: got %.9g want %.9g (limit %.3g: %s)\n", t->what, name,
				       i, g, r, lim, t->why);
			bad++;
		}
	}
	/* the margin left, for the table's reasons: a measurement */
	if (n > 1 || bad)
		printf("#   %s %s: %d of %zu outside; worst at [%zu], %.3g of its limit\n", t->what, name, bad, n,
		       wi, worst);
	return bad;
}

/* The same with atol in units of scale: |got - ref| <= atol * scale +
 * rtol * |ref|.  For a tensor's entries scale is its mean |ref| and for a
 * sum of them the sum of |ref|: a sum's rounding error is bounded by the
 * sum of its terms' magnitudes, not by its (possibly cancelled) value. */
static inline int tol_check_scaled(const struct tol *t, const char *name, const double *got,
				   const double *ref, size_t n, double scale)
{
	struct tol s = *t;
	s.atol = t->atol * scale;
	return tol_check(&s, name, NULL, got, ref, NULL, n);
}

#define TOL(what) tol_find(tols, sizeof(tols) / sizeof(tols[0]), what)
/* double arrays */
#define check(what, name, got, ref, n) tol_check(TOL(what), name, NULL, got, ref, NULL, (size_t)(n))
#define check_scaled(what, name, got, ref, n, scale) \
	tol_check_scaled(TOL(what), name, got, ref, (size_t)(n), scale)
/* float arrays */
#define checkf(what, name, got, ref, n) tol_check(TOL(what), name, got, NULL, NULL, ref, (size_t)(n))

#endif
