/*
 * fft_callbacks.cu — lab probe: can cuFFT's LTO callbacks take over the
 * passes bk_rfft and bk_irfft_unnormalized run around cuFFT for rows longer
 * than the direct transform's 32 points?
 *
 *  - rfft: a store callback writes every bin and sets the imaginary part of
 *    bin 0 and (even n) bin n/2 to +0, instead of a second pass that writes
 *    those two values into every row afterwards;
 *  - irfft (unnormalized): a load callback reads the caller's spectrum,
 *    which C2R must not overwrite, with the ignored imaginary parts read as
 *    0, while the transform runs on an untouched scratch buffer; instead of
 *    a prepared copy of the spectrum.
 *
 * For each case it times (CUDA events, median of 9 bursts of 5 after a
 * warm-up) the plain transform, the library's extra pass, and the
 * transform with the callback; checks that the callback results are
 * bitwise those of transform + pass; and reports how long the plan with a
 * callback took to make (its JIT link). The callbacks are compiled at run
 * time by NVRTC to LTO-IR.
 *   nvcc -O2 -arch=sm_90 -o fft_callbacks dev/cuda/fft_callbacks.cu -lcufft -lnvrtc
 */
#include <cuda_runtime.h>
#include <cufft.h>
#include <cufftXt.h>
#include <nvrtc.h>

#include <chrono>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                      \
  do {                                                                             \
    long e_ = (long)(x);                                                           \
    if (e_) {                                                                      \
      fprintf(stderr, "%s:%d: %s failed (%ld)\n", __FILE__, __LINE__, #x, e_);     \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* info[0] = bins per row m, info[1] = 1 for even n, info[2] = the caller's
 * spectrum (load callbacks). */
static const char *cb_src = R"(
extern "C" __device__ void bk_store_c(void *out, unsigned long long off, float2 v, void *info,
                                      void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0f;
  ((float2 *)out)[off] = v;
}
extern "C" __device__ void bk_store_z(void *out, unsigned long long off, double2 v, void *info,
                                      void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0;
  ((double2 *)out)[off] = v;
}
extern "C" __device__ float2 bk_load_c(void *in, unsigned long long off, void *info, void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  float2 v = ((const float2 *)p[2])[off];
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0f;
  return v;
}
extern "C" __device__ double2 bk_load_z(void *in, unsigned long long off, void *info, void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  double2 v = ((const double2 *)p[2])[off];
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0;
  return v;
}
)";

static std::vector<char> lto_ir;

static void compile_callbacks(int nopt, const char **opts) {
  nvrtcProgram prog;
  CK(nvrtcCreateProgram(&prog, cb_src, "bk_fft_callbacks.cu", 0, NULL, NULL));
  nvrtcResult r = nvrtcCompileProgram(prog, nopt, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::vector<char> log(n + 1);
    nvrtcGetProgramLog(prog, log.data());
    fprintf(stderr, "nvrtc: %s\n%s\n", nvrtcGetErrorString(r), log.data());
    exit(1);
  }
  size_t n = 0;
  CK(nvrtcGetLTOIRSize(prog, &n));
  lto_ir.resize(n);
  CK(nvrtcGetLTOIR(prog, lto_ir.data()));
  nvrtcDestroyProgram(&prog);
}

/* The library's passes: zero the real bins' imaginary parts of y (rfft);
 * copy spec to work with them zeroed (irfft). */
template <typename R>
__global__ void zero_bins(R *y, long long batch, long long m, int even) {
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < batch;
       b += (long long)gridDim.x * blockDim.x) {
    y[2 * b * m + 1] = 0;
    if (even) y[2 * (b * m + m - 1) + 1] = 0;
  }
}
template <typename R>
__global__ void prepare(const R *spec, R *work, long long count, long long m, int even) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    const long long k = i % m;
    work[2 * i] = spec[2 * i];
    work[2 * i + 1] = (k == 0 || (even && k == m - 1)) ? (R)0 : spec[2 * i + 1];
  }
}

template <typename F>
static float time_ms(F f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  CK(cudaDeviceSynchronize());
  std::vector<float> t(9);
  for (int r = 0; r < 9; r++) {
    CK(cudaEventRecord(a));
    for (int q = 0; q < 5; q++) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&t[r], a, b));
    t[r] /= 5;
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[4];
}

template <typename R>
__global__ void fill(R *p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = (R)((double)(h & 0xffffff) / 16777216.0 - 0.5);
  }
}

static cufftHandle make_plan(long long n, long long batch, cufftType type, const char *cb,
                             cufftXtCallbackType cbt, void *info, size_t *work, double *ms) {
  cufftHandle plan;
  CK(cufftCreate(&plan));
  CK(cufftSetAutoAllocation(plan, 1));
  auto t0 = std::chrono::steady_clock::now();
  if (cb) {
    void *infos[1] = {info};
    cufftResult r = cufftXtSetJITCallback(plan, cb, lto_ir.data(), lto_ir.size(), cbt, infos);
    if (r != CUFFT_SUCCESS) {
      printf("cufftXtSetJITCallback(%s) failed: %d\n", cb, (int)r);
      cufftDestroy(plan);
      return 0;
    }
  }
  long long dims[1] = {n};
  cufftResult r = cufftMakePlanMany64(plan, 1, dims, NULL, 1, 0, NULL, 1, 0, type, batch, work);
  if (r != CUFFT_SUCCESS) {
    printf("cufftMakePlanMany64 (%s) failed: %d\n", cb ? cb : "no callback", (int)r);
    cufftDestroy(plan);
    return 0;
  }
  auto t1 = std::chrono::steady_clock::now();
  *ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  return plan;
}

template <typename R>
static void rfft_case(long long batch, long long n) {
  const bool f32 = sizeof(R) == 4;
  const long long m = n / 2 + 1;
  R *x, *y0, *y1;
  unsigned long long *info;
  CK(cudaMalloc((void **)&x, batch * n * sizeof(R)));
  CK(cudaMalloc((void **)&y0, batch * m * 2 * sizeof(R)));
  CK(cudaMalloc((void **)&y1, batch * m * 2 * sizeof(R)));
  CK(cudaMalloc((void **)&info, 3 * sizeof *info));
  unsigned long long hi[3] = {(unsigned long long)m, (unsigned long long)(n % 2 == 0), 0};
  CK(cudaMemcpy(info, hi, sizeof hi, cudaMemcpyHostToDevice));
  fill<R><<<1024, 256>>>(x, batch * n, 1);
  size_t w0, w1;
  double p0, p1;
  cufftType t = f32 ? CUFFT_R2C : CUFFT_D2Z;
  cufftHandle plain = make_plan(n, batch, t, NULL, CUFFT_CB_UNDEFINED, NULL, &w0, &p0);
  cufftHandle cbp = make_plan(n, batch, t, f32 ? "bk_store_c" : "bk_store_z",
                              f32 ? CUFFT_CB_ST_COMPLEX : CUFFT_CB_ST_COMPLEX_DOUBLE, info, &w1,
                              &p1);
  if (!cbp) return;
  auto exec = [&](cufftHandle p, R *out) {
    if (f32) CK(cufftExecR2C(p, (cufftReal *)x, (cufftComplex *)out));
    else CK(cufftExecD2Z(p, (cufftDoubleReal *)x, (cufftDoubleComplex *)out));
  };
  const float t_plain = time_ms([&] { exec(plain, y0); });
  const float t_zero = time_ms([&] { zero_bins<R><<<132 * 32, 256>>>(y0, batch, m, n % 2 == 0); });
  const float t_cb = time_ms([&] { exec(cbp, y1); });
  exec(plain, y0);
  zero_bins<R><<<132 * 32, 256>>>(y0, batch, m, n % 2 == 0);
  exec(cbp, y1);
  CK(cudaDeviceSynchronize());
  std::vector<R> a(batch * m * 2), b(batch * m * 2);
  CK(cudaMemcpy(a.data(), y0, a.size() * sizeof(R), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), y1, b.size() * sizeof(R), cudaMemcpyDeviceToHost));
  const bool same = memcmp(a.data(), b.data(), a.size() * sizeof(R)) == 0;
  printf("rfft %s %lldx%lld: plain %.4f + zero pass %.4f = %.4f ms; store callback %.4f ms "
         "(%.2fx); results %s; plans made in %.1f / %.1f ms\n",
         f32 ? "f32" : "f64", batch, n, t_plain, t_zero, t_plain + t_zero, t_cb,
         (t_plain + t_zero) / t_cb, same ? "bitwise equal" : "DIFFER", p0, p1);
  cufftDestroy(plain);
  cufftDestroy(cbp);
  cudaFree(x);
  cudaFree(y0);
  cudaFree(y1);
  cudaFree(info);
}

template <typename R>
static void irfft_case(long long batch, long long n) {
  const bool f32 = sizeof(R) == 4;
  const long long m = n / 2 + 1;
  R *spec, *work, *y0, *y1;
  unsigned long long *info;
  CK(cudaMalloc((void **)&spec, batch * m * 2 * sizeof(R)));
  CK(cudaMalloc((void **)&work, batch * m * 2 * sizeof(R)));
  CK(cudaMalloc((void **)&y0, batch * n * sizeof(R)));
  CK(cudaMalloc((void **)&y1, batch * n * sizeof(R)));
  CK(cudaMalloc((void **)&info, 3 * sizeof *info));
  unsigned long long hi[3] = {(unsigned long long)m, (unsigned long long)(n % 2 == 0),
                              (unsigned long long)(uintptr_t)spec};
  CK(cudaMemcpy(info, hi, sizeof hi, cudaMemcpyHostToDevice));
  fill<R><<<1024, 256>>>(spec, batch * m * 2, 2);
  size_t w0, w1;
  double p0, p1;
  cufftType t = f32 ? CUFFT_C2R : CUFFT_Z2D;
  cufftHandle plain = make_plan(n, batch, t, NULL, CUFFT_CB_UNDEFINED, NULL, &w0, &p0);
  cufftHandle cbp = make_plan(n, batch, t, f32 ? "bk_load_c" : "bk_load_z",
                              f32 ? CUFFT_CB_LD_COMPLEX : CUFFT_CB_LD_COMPLEX_DOUBLE, info, &w1,
                              &p1);
  if (!cbp) return;
  auto exec = [&](cufftHandle p, R *in, R *out) {
    if (f32) CK(cufftExecC2R(p, (cufftComplex *)in, (cufftReal *)out));
    else CK(cufftExecZ2D(p, (cufftDoubleComplex *)in, (cufftDoubleReal *)out));
  };
  const long long count = batch * m;
  const float t_prep =
      time_ms([&] { prepare<R><<<132 * 32, 256>>>(spec, work, count, m, n % 2 == 0); });
  const float t_plain = time_ms([&] { exec(plain, work, y0); });
  const float t_cb = time_ms([&] { exec(cbp, work, y1); });
  prepare<R><<<132 * 32, 256>>>(spec, work, count, m, n % 2 == 0);
  exec(plain, work, y0);
  exec(cbp, work, y1); /* reads spec through the callback; work is scratch */
  CK(cudaDeviceSynchronize());
  std::vector<R> a(batch * n), b(batch * n);
  CK(cudaMemcpy(a.data(), y0, a.size() * sizeof(R), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), y1, b.size() * sizeof(R), cudaMemcpyDeviceToHost));
  const bool same = memcmp(a.data(), b.data(), a.size() * sizeof(R)) == 0;
  printf("irfft %s %lldx%lld: prepare %.4f + plain %.4f = %.4f ms; load callback %.4f ms "
         "(%.2fx); results %s; plans made in %.1f / %.1f ms\n",
         f32 ? "f32" : "f64", batch, n, t_prep, t_plain, t_prep + t_plain, t_cb,
         (t_prep + t_plain) / t_cb, same ? "bitwise equal" : "DIFFER", p0, p1);
  cufftDestroy(plain);
  cufftDestroy(cbp);
  cudaFree(spec);
  cudaFree(work);
  cudaFree(y0);
  cudaFree(y1);
  cudaFree(info);
}

/* argv: the NVRTC options for the callbacks (default -arch=sm_90 -dlto
 * -rdc=true); "--small" first runs one small case only. */
int main(int argc, char **argv) {
  int a = 1;
  const bool small = argc > 1 && strcmp(argv[1], "--small") == 0;
  if (small) a++;
  const char *defaults[] = {"-arch=sm_90", "-dlto", "-rdc=true"};
  const int nopt = argc > a ? argc - a : 3;
  const char **opts = argc > a ? (const char **)(argv + a) : defaults;
  auto t0 = std::chrono::steady_clock::now();
  compile_callbacks(nopt, opts);
  auto t1 = std::chrono::steady_clock::now();
  printf("NVRTC to LTO-IR:");
  for (int i = 0; i < nopt; i++) printf(" %s", opts[i]);
  printf(": %zu bytes in %.1f ms\n", lto_ir.size(),
         std::chrono::duration<double, std::milli>(t1 - t0).count());
  if (small) {
    rfft_case<float>(100000, 56);
    irfft_case<float>(100000, 60);
    return 0;
  }
  rfft_case<float>(1452927, 56);
  rfft_case<float>(178114, 512);
  rfft_case<float>(1172, 4096);
  rfft_case<float>(116046, 1400);
  rfft_case<double>(726463, 56);
  rfft_case<double>(89057, 512);
  irfft_case<float>(2728232, 60);
  irfft_case<float>(480425, 512);
  irfft_case<float>(965562, 128);
  irfft_case<double>(1364116, 60);
  irfft_case<double>(240212, 512);
  return 0;
}
