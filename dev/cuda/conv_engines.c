/*
 * conv_engines.c — lab probe: which cuDNN engines can take a convolution,
 * in which order the heuristics rank them, and how fast each one is on
 * random data.
 *
 * bk_conv's cuDNN route (src/cuda/conv.cu) takes the first engine of the
 * heuristic order (mode A) that is deterministic and, in float32, free of
 * tensor cores and reduced precision. This probe lists, for each shape read
 * from standard input (one per line, in the form `bench/vs_torch.py --sweep
 * --list-only` prints: N= cin= cout= groups= in= k= stride= pad_before=
 * pad_after= dil=), every configuration of heuristic modes A and B with
 * its global engine index, numerical and behaviour notes, whether the
 * library's filter allows it, the time to make its plan, its workspace and
 * its time (CUDA events, median of up to 5 runs after one warm-up). Two
 * views of the padding: the library's (symmetric part as cuDNN padding,
 * the input enlarged by the rest) and cuDNN's own pre/post paddings.
 *
 *   gcc -O2 -o conv_engines dev/cuda/conv_engines.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64 -lcudnn -lcudart -lm
 *   ./conv_engines f32 < shapes.txt
 */
#include <cuda_runtime.h>
#include <cudnn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
  int64_t n, cin, cout, groups, rank;
  int64_t in[3], k[3], stride[3], pb[3], pa[3], dil[3];
} shape;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int parse_list(const char *s, int64_t *v) {
  int n = 0;
  while (*s && n < 3) {
    v[n++] = strtoll(s, (char **)&s, 10);
    if (*s == ',') s++;
    else break;
  }
  return n;
}

static int parse(const char *line, shape *sh) {
  memset(sh, 0, sizeof *sh);
  const char *p;
#define INT(key, dst) if ((p = strstr(line, " " key "="))) dst = strtoll(p + strlen(key) + 2, NULL, 10); else return 0
#define LIST(key, dst) if ((p = strstr(line, " " key "="))) r = parse_list(p + strlen(key) + 2, dst); else return 0
  int r = 0;
  INT("N", sh->n); INT("cin", sh->cin); INT("cout", sh->cout); INT("groups", sh->groups);
  LIST("in", sh->in); sh->rank = r;
  LIST("k", sh->k); LIST("stride", sh->stride); LIST("pad_before", sh->pb);
  LIST("pad_after", sh->pa); LIST("dil", sh->dil);
  return 1;
}

#define CK(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) return s_; } while (0)

static cudnnStatus_t tensor(int64_t uid, cudnnDataType_t dt, int nd, const int64_t *dims,
                            cudnnBackendDescriptor_t *out) {
  int64_t str[5], align = 16;
  str[nd - 1] = 1;
  for (int a = nd - 2; a >= 0; a--) str[a] = str[a + 1] * dims[a + 1];
  CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
  CK(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  CK(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dims));
  CK(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, str));
  CK(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CK(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  return cudnnBackendFinalize(*out);
}

/* The graph of y = conv(x, w) in cuDNN rank (2 or 3 spatial axes). */
static cudnnStatus_t graph(cudnnHandle_t h, int f32, int rank, const int64_t *xd, const int64_t *wd,
                           const int64_t *yd, const int64_t *pre, const int64_t *post,
                           const int64_t *stride, const int64_t *dil, cudnnBackendDescriptor_t *g) {
  cudnnDataType_t dt = f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
  cudnnBackendDescriptor_t x, w, y, c, op;
  CK(tensor(1, dt, rank + 2, xd, &x));
  CK(tensor(2, dt, rank + 2, wd, &w));
  CK(tensor(3, dt, rank + 2, yd, &y));
  int64_t dims = rank;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &c));
  CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
  CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, pre));
  CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, post));
  CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, dil));
  CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, stride));
  CK(cudnnBackendFinalize(c));
  float one_f = 1, zero_f = 0;
  double one_d = 1, zero_d = 0;
  cudnnBackendAttributeType_t st = f32 ? CUDNN_TYPE_FLOAT : CUDNN_TYPE_DOUBLE;
  CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, st, 1, f32 ? (void *)&one_f : (void *)&one_d));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, st, 1, f32 ? (void *)&zero_f : (void *)&zero_d));
  CK(cudnnBackendFinalize(op));
  CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, g));
  CK(cudnnBackendSetAttribute(*g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
  CK(cudnnBackendSetAttribute(*g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  return cudnnBackendFinalize(*g);
}

static double time_plan(cudnnHandle_t h, cudnnBackendDescriptor_t plan, void *x, void *w, void *y,
                        void *ws) {
  int64_t uids[3] = {1, 2, 3};
  void *ptrs[3] = {x, w, y};
  cudnnBackendDescriptor_t pack;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack)) return -1;
  cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (cudnnBackendFinalize(pack)) return -2;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  double t[5];
  int runs = 0;
  if (cudnnBackendExecute(h, plan, pack)) return -3;
  for (; runs < 5; runs++) {
    cudaEventRecord(a, 0);
    if (cudnnBackendExecute(h, plan, pack)) return -3;
    cudaEventRecord(b, 0);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    t[runs] = ms;
    if (ms > 40) { runs++; break; }
  }
  cudnnBackendDestroyDescriptor(pack);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  for (int i = 0; i < runs; i++)
    for (int j = i + 1; j < runs; j++)
      if (t[j] < t[i]) { double s = t[i]; t[i] = t[j]; t[j] = s; }
  return cudaGetLastError() == cudaSuccess ? t[runs / 2] : -4;
}

static const char *note_names[] = {"TC", "DOWNCONV", "REDPREC", "FFT", "NONDET", "WINO", "W4", "W6", "W13", "NANPROP"};

static void list(cudnnHandle_t h, cudnnBackendDescriptor_t g, cudnnBackendHeurMode_t mode, int f32,
                 void *x, void *w, void *y, const char *view) {
  cudnnBackendDescriptor_t heur;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur)) return;
  cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
  cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  double t0 = now_ms();
  cudnnStatus_t s = cudnnBackendFinalize(heur);
  int64_t count = 0;
  if (!s) s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
  printf("  %s mode %d: %s, %lld configurations (%.2f ms)\n", view, (int)mode,
         s ? cudnnGetErrorString(s) : "ok", (long long)count, now_ms() - t0);
  if (s || count == 0) return;
  if (count > 64) count = 64;
  cudnnBackendDescriptor_t cfg[64];
  for (int64_t i = 0; i < count; i++) cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]);
  int64_t got = 0;
  cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
  int first = 1;
  for (int64_t i = 0; i < got; i++) {
    cudnnBackendDescriptor_t eng;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
    int64_t n = 0, gi = -1;
    cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng);
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &gi);
    cudnnBackendNumericalNote_t nn[16];
    cudnnBackendBehaviorNote_t bn[16];
    int64_t nnn = 0, nbn = 0;
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &nnn, nn);
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 16, &nbn, bn);
    char notes[128] = "";
    int allowed = 1;
    for (int64_t j = 0; j < nnn; j++) {
      if (nn[j] < 10) { strcat(notes, note_names[nn[j]]); strcat(notes, " "); }
      if (nn[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) allowed = 0;
      if (f32 && (nn[j] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || nn[j] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
                  nn[j] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)) allowed = 0;
    }
    for (int64_t j = 0; j < nbn; j++) {
      if (bn[j] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) strcat(notes, "RTC ");
      if (bn[j] == CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API) strcat(notes, "GRAPH ");
    }
    cudnnBackendDestroyDescriptor(eng);
    double ms = -9, mk = 0;
    int64_t ws = -1;
    const char *why = "";
    if (allowed || i < 3) {
      cudnnBackendDescriptor_t plan;
      cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
      cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
      t0 = now_ms();
      s = cudnnBackendFinalize(plan);
      mk = now_ms() - t0;
      if (s) why = cudnnGetErrorString(s);
      else {
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
        void *wsp = NULL;
        if (ws > ((int64_t)1 << 30)) why = "workspace > 1 GiB";
        else if (ws > 0 && cudaMalloc(&wsp, ws)) why = "no memory for workspace";
        else ms = time_plan(h, plan, x, w, y, wsp);
        if (wsp) cudaFree(wsp);
      }
      cudnnBackendDestroyDescriptor(plan);
    }
    printf("    %2lld eng %3lld %-24s %s%s plan %.1f ms ws %lld time %.4f ms %s\n", (long long)i,
           (long long)gi, notes, allowed ? "allowed" : "-------", allowed && first && ms >= 0 ? " FIRST" : "",
           mk, (long long)ws, ms, why);
    if (allowed && ms >= 0) first = 0;
  }
  for (int64_t i = 0; i < count; i++) cudnnBackendDestroyDescriptor(cfg[i]);
  cudnnBackendDestroyDescriptor(heur);
}

static void fill(void *p, size_t n, int f32) {
  /* random values on the host in chunks, copied up */
  size_t chunk = (size_t)1 << 22;
  void *h = malloc(chunk * 8);
  uint64_t r = 88172645463325252ull;
  for (size_t o = 0; o < n; o += chunk) {
    size_t m = n - o < chunk ? n - o : chunk;
    for (size_t i = 0; i < m; i++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      double v = (double)(r >> 11) / 9007199254740992.0 - 0.5;
      if (f32) ((float *)h)[i] = (float)v; else ((double *)h)[i] = v;
    }
    cudaMemcpy((char *)p + o * (f32 ? 4 : 8), h, m * (f32 ? 4 : 8), cudaMemcpyHostToDevice);
  }
  free(h);
}

int main(int argc, char **argv) {
  int f32 = argc < 2 || strcmp(argv[1], "f64") != 0;
  cudnnHandle_t h;
  if (cudnnCreate(&h)) return 1;
  printf("cuDNN %zu, %s\n", cudnnGetVersion(), f32 ? "float32" : "float64");
  char line[1024];
  while (fgets(line, sizeof line, stdin)) {
    shape sh;
    char buf[1100];
    snprintf(buf, sizeof buf, " %s", line);
    if (!parse(buf, &sh)) continue;
    line[strcspn(line, "\n")] = 0;
    printf("%s\n", line);
    /* cuDNN rank: 1-D as 2-D with height 1 */
    int rank = sh.rank == 3 ? 3 : 2, off = rank - (int)sh.rank;
    int64_t xd[5], xe[5], wd[5], yd[5], sym[3], pre[3], post[3], st[3], dl[3];
    xd[0] = xe[0] = yd[0] = sh.n; xd[1] = xe[1] = sh.cin; yd[1] = sh.cout;
    wd[0] = sh.cout; wd[1] = sh.cin / sh.groups;
    size_t xs = sh.n * sh.cin, xes = xs, ys = sh.n * sh.cout, wsz = sh.cout * (sh.cin / sh.groups);
    for (int a = 0; a < rank; a++) {
      int s = a - off;
      int64_t in = s < 0 ? 1 : sh.in[s], k = s < 0 ? 1 : sh.k[s], str = s < 0 ? 1 : sh.stride[s];
      int64_t d = s < 0 ? 1 : sh.dil[s], b = s < 0 ? 0 : sh.pb[s], e = s < 0 ? 0 : sh.pa[s];
      int64_t m = b < e ? b : e;
      xd[2 + a] = in; xe[2 + a] = in + (b - m) + (e - m);
      wd[2 + a] = k;
      yd[2 + a] = (in + b + e - (k - 1) * d - 1) / str + 1;
      sym[a] = m; pre[a] = b; post[a] = e; st[a] = str; dl[a] = d;
      xs *= xd[2 + a]; xes *= xe[2 + a]; ys *= yd[2 + a]; wsz *= k;
    }
    size_t es = f32 ? 4 : 8;
    void *x = NULL, *w = NULL, *y = NULL;
    if (cudaMalloc(&x, xes * es) || cudaMalloc(&w, wsz * es) || cudaMalloc(&y, ys * es)) {
      printf("  no memory\n");
      cudaGetLastError();
      continue;
    }
    fill(x, xes, f32);
    fill(w, wsz, f32);
    cudnnBackendDescriptor_t g;
    cudnnStatus_t s = graph(h, f32, rank, xe, wd, yd, sym, sym, st, dl, &g);
    if (s) printf("  library view: graph %s\n", cudnnGetErrorString(s));
    else {
      list(h, g, CUDNN_HEUR_MODE_A, f32, x, w, y, "library view");
      list(h, g, CUDNN_HEUR_MODE_B, f32, x, w, y, "library view");
    }
    if (memcmp(pre, post, sizeof pre)) {
      s = graph(h, f32, rank, xd, wd, yd, pre, post, st, dl, &g);
      if (s) printf("  pre/post view: graph %s\n", cudnnGetErrorString(s));
      else list(h, g, CUDNN_HEUR_MODE_A, f32, x, w, y, "pre/post view");
    }
    cudaFree(x); cudaFree(w); cudaFree(y);
    fflush(stdout);
  }
  cudnnDestroy(h);
  return 0;
}
