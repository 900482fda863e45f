/*
 * test_outparams.c — the out-parameter rules of the header.
 *
 *  - Two out-parameters of one call that are the same slot: rejected with
 *    BK_ERR_INVALID_ARGUMENT naming both, before anything is allocated;
 *    tried for every pair of slots of every multi-output primitive
 *    (layer-norm forward and backward, both scan backwards) and for all
 *    slots at once, and for bk_bmm_scaled's range_loss over its out.
 *  - An out-parameter that is the address of the caller's variable holding
 *    an input: valid; the input is read as passed and the variable then
 *    holds the result (NULL after a failure), so the caller's other
 *    reference releases the input. Tried for a single-output primitive and
 *    for the multi-output ones.
 * Every case checks the status, the slots and the live-buffer count.
 */
#include "testlib.h"
#include "core/internal.h"

/* A value no slot holds after a call, so an uncleared slot is seen. */
static bk_buffer *const stale = (bk_buffer *)(uintptr_t)0x5a5a5a5a5a5a5a50ull;

#define MAX_OUT 4

/* A multi-output primitive over its slots o[0..n). */
typedef struct multi {
  const char *fn;
  int nout;
  const char *names[MAX_OUT];
  int64_t in_len[6]; /* -1 ends */
  bk_status (*call)(bk_buffer *const *in, bk_buffer **const *o);
} multi;

static bk_status m_ln_f(bk_buffer *const *in, bk_buffer **const *o) {
  return bk_layernorm_forward(tl_ctx, in[0], in[1], in[2], 4, 6, 1e-5, o[0], o[1], o[2]);
}
static bk_status m_ln_b(bk_buffer *const *in, bk_buffer **const *o) {
  return bk_layernorm_backward(tl_ctx, in[0], in[1], in[2], in[3], 4, 6, o[0], o[1], o[2]);
}
static bk_status m_scan_b(bk_buffer *const *in, bk_buffer **const *o) {
  return bk_scan_diag_backward(tl_ctx, in[0], in[1], in[2], in[3], in[4], in[5], 5, 3, o[0], o[1],
                               o[2], o[3]);
}
static bk_status m_scan_vb(bk_buffer *const *in, bk_buffer **const *o) {
  return bk_scan_diag_var_backward(tl_ctx, in[0], in[1], in[2], in[3], in[4], in[5], 5, 3, o[0],
                                   o[1], o[2], o[3]);
}

static const multi multis[] = {
    {"bk_layernorm_forward", 3, {"out", "normalized", "inv_std"}, {24, 6, 6, -1}, m_ln_f},
    {"bk_layernorm_backward", 3, {"dx", "dgamma", "dbeta"}, {24, 24, 4, 6, -1}, m_ln_b},
    {"bk_scan_diag_backward", 4, {"dA", "dB", "dX", "dh0"}, {3, 3, 15, 3, 15, 15}, m_scan_b},
    {"bk_scan_diag_var_backward", 4, {"dA", "dB", "dX", "dh0"}, {15, 15, 15, 3, 15, 15}, m_scan_vb},
};
#define N_MULTI ((int)(sizeof multis / sizeof multis[0]))

static int make_inputs(const multi *m, bk_dtype dt, bk_buffer **in) {
  int n = 0;
  for (; n < 6 && m->in_len[n] >= 0; n++) {
    double v[24];
    /* Positive values keep inv_std finite for the layer-norm VJP. */
    tl_fill_uniform(v, m->in_len[n], 0.5, 1.5);
    in[n] = tl_buf(dt, v, m->in_len[n]);
  }
  for (int j = n; j < 6; j++) in[j] = NULL;
  return n;
}

/* The message names both parameters of the aliased pair. */
static void check_alias_message(const char *fn, const char *a, const char *b) {
  const char *msg = bk_last_error();
  TL_CHECK(strncmp(msg, fn, strlen(fn)) == 0 && strstr(msg, a) && strstr(msg, b),
           "message \"%s\" does not name %s, %s and %s", msg, fn, a, b);
}

/* Every pair (i, j) of slots made one, then all slots one. */
static void t_same_slot(void) {
  for (int c = 0; c < N_MULTI; c++) {
    const multi *m = &multis[c];
    tl_case = m->fn;
    bk_buffer *in[6];
    int nin = make_inputs(m, BK_F64, in);
    int64_t live0 = bk__live_buffers();
    for (int i = 0; i < m->nout; i++)
      for (int j = i + 1; j < m->nout; j++) {
        bk_buffer *slot[MAX_OUT];
        bk_buffer **o[MAX_OUT];
        for (int s = 0; s < m->nout; s++) {
          slot[s] = stale;
          o[s] = &slot[s];
        }
        o[j] = o[i];
        TL_REJECT(m->call(in, o), BK_ERR_INVALID_ARGUMENT, NULL);
        check_alias_message(m->fn, m->names[i], m->names[j]);
        for (int s = 0; s < m->nout; s++)
          TL_CHECK(slot[s] == NULL || s == j, "%s: slot %s not NULL", m->fn, m->names[s]);
        TL_CHECK(bk__live_buffers() == live0, "%s: %" PRId64 " buffers leaked", m->fn,
                 bk__live_buffers() - live0);
      }
    bk_buffer *same = stale;
    bk_buffer **all[MAX_OUT] = {&same, &same, &same, &same};
    TL_REJECT(m->call(in, all), BK_ERR_INVALID_ARGUMENT, NULL);
    check_alias_message(m->fn, m->names[0], m->names[1]);
    TL_CHECK(same == NULL, "%s: the shared slot is not NULL", m->fn);
    TL_CHECK(bk__live_buffers() == live0, "%s: %" PRId64 " buffers leaked", m->fn,
             bk__live_buffers() - live0);
    /* A NULL slot is reported first, as BK_ERR_NULL, even with an aliased
     * pair after it. */
    bk_buffer **null_first[MAX_OUT] = {NULL, &same, &same, &same};
    same = stale;
    TL_REJECT(m->call(in, null_first), BK_ERR_NULL, m->names[0]);
    TL_CHECK(same == NULL, "%s: the shared slot is not NULL", m->fn);
    for (int j = 0; j < nin; j++) bk_buffer_release(in[j]);
  }
}

/* Each output slot in turn holds the caller's handle of an input: the call
 * succeeds with the results of a call into fresh slots, bit for bit. */
static void t_slot_holds_input(void) {
  for (int c = 0; c < N_MULTI; c++) {
    const multi *m = &multis[c];
    tl_case = m->fn;
    for (int dti = 0; dti < TL_DTYPES; dti++) {
      bk_buffer *in[6];
      int nin = make_inputs(m, tl_dtypes[dti], in);
      bk_buffer *ref[MAX_OUT] = {NULL};
      bk_buffer **ro[MAX_OUT] = {&ref[0], &ref[1], &ref[2], &ref[3]};
      if (TL_OK(m->call(in, ro)) != BK_OK) continue;
      int64_t live0 = bk__live_buffers();
      for (int s = 0; s < m->nout; s++) {
        for (int k = 0; k < nin; k++) {
          bk_buffer *var[6], *slot[MAX_OUT];
          bk_buffer **o[MAX_OUT];
          memcpy(var, in, sizeof var);
          for (int t = 0; t < m->nout; t++) o[t] = &slot[t];
          /* Slot s is the variable that holds input k. */
          o[s] = &var[k];
          if (TL_OK(m->call(var, o)) != BK_OK) continue;
          for (int t = 0; t < m->nout; t++) {
            TL_CHECK(tl_same_bits(*o[t], ref[t]), "%s: %s differs when it overwrites input %d",
                     m->fn, m->names[t], k);
            bk_buffer_release(*o[t]);
          }
          TL_CHECK(bk__live_buffers() == live0, "%s: %" PRId64 " buffers leaked", m->fn,
                   bk__live_buffers() - live0);
        }
      }
      for (int t = 0; t < m->nout; t++) bk_buffer_release(ref[t]);
      for (int j = 0; j < nin; j++) bk_buffer_release(in[j]);
    }
  }
}

/* The single-output form: bk_softmax(ctx, x, ..., &x). */
static void t_single_output(void) {
  const int64_t dims[2] = {3, 4};
  double v[12];
  tl_fill_uniform(v, 12, -2, 2);
  for (int dti = 0; dti < TL_DTYPES; dti++) {
    bk_buffer *x = tl_buf(tl_dtypes[dti], v, 12), *ref = NULL;
    if (TL_OK(bk_softmax(tl_ctx, x, dims, 2, 1, &ref)) != BK_OK) continue;
    int64_t live0 = bk__live_buffers();
    bk_buffer *keep = x;
    if (TL_OK(bk_softmax(tl_ctx, x, dims, 2, 1, &x)) == BK_OK) {
      TL_CHECK(x != keep && tl_same_bits(x, ref), "bk_softmax into its input's variable");
      TL_UNCHANGED(keep, v, 12);
      bk_buffer_release(x);
    }
    /* A failure leaves NULL in the variable; the caller's other reference
     * still releases the input. */
    x = keep;
    TL_REJECT(bk_softmax(tl_ctx, x, dims, 2, 2, &x), BK_ERR_INVALID_ARGUMENT, "axis");
    TL_CHECK(x == NULL, "the failed call left a handle in its out-parameter");
    TL_CHECK(bk__live_buffers() == live0, "%" PRId64 " buffers leaked", bk__live_buffers() - live0);
    /* bk_buffer_copy into the variable of its source. */
    x = keep;
    if (TL_OK(bk_buffer_copy(tl_ctx, x, &x)) == BK_OK) {
      TL_CHECK(x != keep && tl_same_bits(x, keep), "bk_buffer_copy into its source's variable");
      bk_buffer_release(x);
    }
    TL_CHECK(bk__live_buffers() == live0, "%" PRId64 " buffers leaked", bk__live_buffers() - live0);
    bk_buffer_release(keep);
    bk_buffer_release(ref);
  }
}

/* bk_bmm_scaled's flag stored over its result's slot. */
static void t_bmm_scaled_overlap(void) {
  double v[4] = {1, 2, 3, 4};
  bk_buffer *A = tl_buf(BK_F64, v, 4), *B = tl_buf(BK_F64, v, 4);
  union {
    bk_buffer *b;
    int i;
  } u;
  int64_t live0 = bk__live_buffers();
  u.b = stale;
  TL_REJECT(bk_bmm_scaled(tl_ctx, A, B, 1, 2, 2, 2, 0, 0, 1.0, &u.b, &u.i),
            BK_ERR_INVALID_ARGUMENT, "range_loss");
  TL_CHECK(u.b == NULL, "out not NULL after the overlap was rejected");
  TL_CHECK(bk__live_buffers() == live0, "%" PRId64 " buffers leaked", bk__live_buffers() - live0);
  bk_buffer_release(A);
  bk_buffer_release(B);
}

int main(void) {
  tl_init();
  tl_seed(3);
  TL_RUN(t_same_slot);
  TL_RUN(t_slot_holds_input);
  TL_RUN(t_single_output);
  TL_RUN(t_bmm_scaled_overlap);
  return tl_finish();
}
