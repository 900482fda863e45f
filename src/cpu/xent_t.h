/*
 * xent_t.h — the typed kernels of xent.c, a template included once per dtype
 * after typed_t.h. Exponentials are evaluated once per element (typed_t.h)
 * and kept in the thread's scratch row when it has one (eS, eT below; NULL
 * means recompute); everything after them is float64.
 */

/* Row r's sum_c w * (lse - x) (see xent.c), in BK_LANES float64 partials. */
static BK_CPU_CLONES_512 double BK_FN(weighted_row)(const BK_T *x, const BK_T *w, int64_t n) {
  if (n == 0) return 0.0;
  const BK_T m = BK_FN(rk_max)(x, n);
  const double lse = (double)m + log(BK_FN(rk_exp_store)(x, NULL, n, m));
  double lane[BK_LANES] = {0};
  int64_t j = 0;
  for (; j + BK_LANES <= n; j += BK_LANES) {
    /* xent_term's common case, w * (lse - x), for a group whose
     * differences are all finite; the whole of it otherwise (in a vector
     * loop its select would compute both forms for every group). */
    double d[BK_LANES];
    int odd = 0;
#pragma omp simd reduction(| : odd)
    for (int l = 0; l < BK_LANES; l++) {
      d[l] = lse - (double)x[j + l];
      odd |= !(fabs(d[l]) < INFINITY);
    }
    if (!odd) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) lane[l] += (double)w[j + l] * d[l];
    } else {
      for (int l = 0; l < BK_LANES; l++) lane[l] += xent_term(w[j + l], x[j + l], lse);
    }
  }
  for (int l = 0; j < n; j++, l++) lane[l] += xent_term(w[j], x[j], lse);
  return bk_fold64(lane);
}

/* Maxima and sums of shifted exponentials of one student and teacher row;
 * the exponentials land in eS, eT when they are given. */
BK_INLINE teacher_row BK_FN(teacher_stats)(const BK_T *S, const BK_T *T, BK_T *eS, BK_T *eT,
                                           int64_t n) {
  teacher_row q;
  const BK_T ms = BK_FN(rk_max)(S, n), mt = BK_FN(rk_max)(T, n);
  q.ms = ms;
  q.mt = mt;
  q.zs = BK_FN(rk_exp_store)(S, eS, n, ms);
  q.zt = BK_FN(rk_exp_store)(T, eT, n, mt);
  return q;
}

/* log sum_c exp(S - ms) - sum_c p_c * (S_c - ms), p_c = exp(T_c - mt) / zt. */
static BK_CPU_CLONES_512 double BK_FN(teacher_loss_row)(const BK_T *S, const BK_T *T, BK_T *eT,
                                                        int64_t n) {
  if (n == 0) return 0.0;
  const teacher_row q = BK_FN(teacher_stats)(S, T, NULL, eT, n);
  const BK_T mt = (BK_T)q.mt;
  const double inv_zt = 1.0 / q.zt;
  double lane[BK_LANES] = {0};
  int64_t j = 0;
  /* Two copies of the loop rather than a select between the stored and a
   * recomputed exponential: in a vector loop the select computes both. */
  if (eT) {
    for (; j + BK_LANES <= n; j += BK_LANES) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++)
        lane[l] += mul0((double)eT[j + l] * inv_zt, (double)S[j + l] - q.ms);
    }
    for (int l = 0; j < n; j++, l++) lane[l] += mul0((double)eT[j] * inv_zt, (double)S[j] - q.ms);
  } else {
    for (; j + BK_LANES <= n; j += BK_LANES) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++)
        lane[l] += mul0((double)BK_FN(bk_expn)(T[j + l] - mt) * inv_zt, (double)S[j + l] - q.ms);
    }
    for (int l = 0; j < n; j++, l++)
      lane[l] += mul0((double)BK_FN(bk_expn)(T[j] - mt) * inv_zt, (double)S[j] - q.ms);
  }
  return log(q.zs) - bk_fold64(lane);
}

/* Rows r0..r1 of the gradient (softmax(S_r) - p_r) / rows, through a tile so
 * the stores can stream; e: 2n scratch values of this thread, or NULL. */
static BK_CPU_CLONES_512 void BK_FN(teacher_grad_block)(const BK_T *S, const BK_T *T, BK_T *g,
                                                        int64_t r0, int64_t r1, int64_t n,
                                                        double rows, BK_T *e, int stream) {
  BK_T tile[BK_CHUNK];
  for (int64_t r = r0; r < r1; r++) {
    const BK_T *Sr = S + r * n, *Tr = T + r * n;
    BK_T *eS = e, *eT = e ? e + n : NULL;
    const teacher_row q = BK_FN(teacher_stats)(Sr, Tr, eS, eT, n);
    const BK_T ms = (BK_T)q.ms, mt = (BK_T)q.mt;
    const double fs = 1.0 / q.zs / rows, ft = 1.0 / q.zt / rows;
    for (int64_t c = 0; c < n; c += BK_CHUNK) {
      const int64_t len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
      /* The stored exponentials or recomputed ones, in two loops (a select
       * in a vector loop computes both sides). */
      if (eS) {
#pragma omp simd
        for (int64_t j = 0; j < len; j++)
          tile[j] = (BK_T)((double)eS[c + j] * fs - (double)eT[c + j] * ft);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < len; j++)
          tile[j] = (BK_T)((double)BK_FN(bk_expn)(Sr[c + j] - ms) * fs -
                           (double)BK_FN(bk_expn)(Tr[c + j] - mt) * ft);
      }
      BK_FN(bk_put)(g + r * n + c, tile, len, stream);
    }
  }
  bk_put_fence(stream);
}

/* ---- narrow rows: BK_LANES rows at a time, one per lane (typed_t.h) ---------- */

/*
 * Rows narrower than BK_LANES run BK_LANES at a time, transposed into tiles
 * (element j of row l at j * BK_LANES + l), every loop across the rows. Per
 * row: the maximum ignoring NaN, the exponentials in the data's type as on
 * the wide path, their sum in float64 in index order, each row's terms
 * folded in index order. Lanes past the last row hold zeros and are
 * dropped.
 */

/* Per lane: m = the lane's maximum of t, z = the float64 sum of exp(t - m);
 * the exponentials replace t when `store`, else t is left as it is. */
BK_INLINE void BK_FN(nk_exp_sum)(BK_T *restrict t, int64_t n, BK_T *restrict m,
                                 double *restrict z, int store) {
  BK_FN(nk_max)(t, n, m);
  for (int l = 0; l < BK_LANES; l++) z[l] = 0.0;
  for (int64_t j = 0; j < n; j++) {
    if (store) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) {
        const BK_T e = BK_FN(bk_expn)(t[j * BK_LANES + l] - m[l]);
        t[j * BK_LANES + l] = e;
        z[l] += (double)e;
      }
    } else {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) z[l] += (double)BK_FN(bk_expn)(t[j * BK_LANES + l] - m[l]);
    }
  }
}

/* part[r] for rows r0..r1 of the weighted cross-entropy, 0 < n < BK_LANES. */
static BK_CPU_CLONES_512 void BK_FN(weighted_narrow)(const BK_T *x, const BK_T *w, double *part,
                                                     int64_t r0, int64_t r1, int64_t n) {
  BK_T tx[BK_LANES * BK_NARROW], tw[BK_LANES * BK_NARROW], m[BK_LANES];
  double z[BK_LANES], lse[BK_LANES], s[BK_LANES];
  for (int64_t r = r0; r < r1; r += BK_LANES) {
    const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
    BK_FN(nk_in)(x + r * n, n, nr, tx, 0);
    BK_FN(nk_in)(w + r * n, n, nr, tw, 0);
    BK_FN(nk_exp_sum)(tx, n, m, z, 0);
    for (int l = 0; l < BK_LANES; l++) {
      lse[l] = (double)m[l] + log(z[l]);
      s[l] = 0.0;
    }
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++)
        s[l] += xent_term(tw[j * BK_LANES + l], tx[j * BK_LANES + l], lse[l]);
    }
    for (int64_t l = 0; l < nr; l++) part[r + l] = s[l];
  }
}

/* The narrow form of teacher_stats: nr rows from row r of S and T into the
 * tiles ts and tt, their maxima and sums of shifted exponentials; tt then
 * holds the teacher's exponentials, ts the student's where store_s. */
BK_INLINE void BK_FN(nk_teacher_stats)(const BK_T *S, const BK_T *T, int64_t r, int64_t n,
                                       int64_t nr, BK_T *ts, BK_T *tt, BK_T *ms, BK_T *mt,
                                       double *zs, double *zt, int store_s) {
  BK_FN(nk_in)(S + r * n, n, nr, ts, 0);
  BK_FN(nk_in)(T + r * n, n, nr, tt, 0);
  BK_FN(nk_exp_sum)(ts, n, ms, zs, store_s);
  BK_FN(nk_exp_sum)(tt, n, mt, zt, 1);
}

/* part[r] for rows r0..r1 of the teacher loss, 0 < n < BK_LANES. */
static BK_CPU_CLONES_512 void BK_FN(teacher_loss_narrow)(const BK_T *S, const BK_T *T, double *part,
                                                         int64_t r0, int64_t r1, int64_t n) {
  BK_T ts[BK_LANES * BK_NARROW], tt[BK_LANES * BK_NARROW], ms[BK_LANES], mt[BK_LANES];
  double zs[BK_LANES], zt[BK_LANES], inv[BK_LANES], s[BK_LANES];
  for (int64_t r = r0; r < r1; r += BK_LANES) {
    const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
    BK_FN(nk_teacher_stats)(S, T, r, n, nr, ts, tt, ms, mt, zs, zt, 0);
    for (int l = 0; l < BK_LANES; l++) {
      inv[l] = 1.0 / zt[l];
      s[l] = 0.0;
    }
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++)
        s[l] += mul0((double)tt[j * BK_LANES + l] * inv[l],
                     (double)ts[j * BK_LANES + l] - (double)ms[l]);
    }
    for (int64_t l = 0; l < nr; l++) part[r + l] = log(zs[l]) - s[l];
  }
}

/* Rows r0..r1 of the teacher gradient, 0 < n < BK_LANES. */
static BK_CPU_CLONES_512 void BK_FN(teacher_grad_narrow)(const BK_T *S, const BK_T *T, BK_T *g,
                                                         int64_t r0, int64_t r1, int64_t n,
                                                         double rows, int stream) {
  BK_T ts[BK_LANES * BK_NARROW], tt[BK_LANES * BK_NARROW], ms[BK_LANES], mt[BK_LANES];
  double zs[BK_LANES], zt[BK_LANES], fs[BK_LANES], ft[BK_LANES];
  for (int64_t r = r0; r < r1; r += BK_LANES) {
    const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
    BK_FN(nk_teacher_stats)(S, T, r, n, nr, ts, tt, ms, mt, zs, zt, 1);
    for (int l = 0; l < BK_LANES; l++) {
      fs[l] = 1.0 / zs[l] / rows;
      ft[l] = 1.0 / zt[l] / rows;
    }
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++)
        ts[j * BK_LANES + l] =
            (BK_T)((double)ts[j * BK_LANES + l] * fs[l] - (double)tt[j * BK_LANES + l] * ft[l]);
    }
    BK_FN(nk_out)(ts, n, nr, g + r * n, stream);
  }
  bk_put_fence(stream);
}
