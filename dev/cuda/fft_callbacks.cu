/*
 * fft_callbacks.cu — lab probe: can cuFFT's LTO callbacks take over the
 * passes bk_rfft and bk_irfft_unnormalized run around cuFFT for rows longer
 * than the direct transform's 32 points (src/cuda/fft.cu)?
 *
 *  - rfft: a store callback writes every bin and sets the imaginary part of
 *    bin 0 and (even n) bin n/2 to +0, instead of real_bins_zero, a second
 *    pass that writes those two values into every row afterwards;
 *  - irfft (unnormalized): a load callback reads the caller's spectrum,
 *    which C2R must not overwrite, with the ignored imaginary parts read as
 *    0, while the transform runs on an untouched scratch buffer; instead of
 *    spec_prepare, the prepared copy of the spectrum.
 *
 * A first version compiled the callbacks with NVRTC as extern "C" functions;
 * cufftXtSetJITCallback accepted them and every plan then failed with
 * CUFFT_INTERNAL_ERROR. This version tries the plausible routes one by one
 * (dev/cuda/fft_callbacks.sh runs each in its own process) and prints every
 * cuFFT call of a route with its result.
 *
 * Modes:
 *   fft_callbacks env                 versions and paths of the CUDA runtime,
 *                                     driver, cuFFT, NVRTC and nvJitLink
 *                                     actually loaded (no callback involved)
 *   fft_callbacks list                the routes, one a line
 *   fft_callbacks emit c|cxx          the callback source (extern "C" or C++
 *                                     linkage) for nvcc
 *   fft_callbacks linkcheck R DIR     no GPU needed: links the route's
 *                                     callback code with nvJitLink against a
 *                                     caller that declares the callbacks the
 *                                     way a C++ caller does (C++ linkage, the
 *                                     LTO callback signature), prints the log
 *   fft_callbacks route R DIR [--bench]
 *                                     makes the four callback plans of route R
 *                                     at small shapes, runs them and checks
 *                                     them bitwise against transform + pass
 *                                     (exit 0: all four work, 6: some, 1:
 *                                     none); --bench then times the large
 *                                     shapes with that route
 * DIR holds the callback objects built by nvcc (fft_callbacks.sh). Built
 * with -DBK_MINIMAL the probe links neither NVRTC nor nvJitLink (no NVRTC
 * routes, no linkcheck): cuFFT then has to open both itself, as it would in
 * a program that only links cuFFT.
 *
 * What the cuFFT 12 library of CUDA 13 shows: cufftXtSetJITCallback takes the
 * symbol name of the callback; at planning cuFFT compiles, with NVRTC, a small
 * C++ wrapper that declares that name as an extern __device__ function with
 * C++ linkage and the LTO callback signature (offset unsigned long long), and
 * links it with the callback code by nvJitLink. A callback defined extern "C"
 * has an unmangled symbol the wrapper's mangled reference does not find.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cufft.h>
#include <cufftXt.h>
#ifndef BK_MINIMAL
#include <nvJitLink.h>
#include <nvrtc.h>
#endif

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

/* ---- reporting ------------------------------------------------------------ */

static const char *cufft_name(int r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    case CUFFT_MISSING_DEPENDENCY: return "CUFFT_MISSING_DEPENDENCY";
    case CUFFT_NVRTC_FAILURE: return "CUFFT_NVRTC_FAILURE";
    case CUFFT_NVJITLINK_FAILURE: return "CUFFT_NVJITLINK_FAILURE";
    case CUFFT_NVSHMEM_FAILURE: return "CUFFT_NVSHMEM_FAILURE";
    default: return "?";
  }
}

/* A cuFFT call of a route: printed with its result; false when it failed. */
static bool cf(const char *what, cufftResult r, double ms = -1) {
  if (ms >= 0)
    printf("    %-44s -> %d %s (%.1f ms)\n", what, (int)r, cufft_name(r), ms);
  else
    printf("    %-44s -> %d %s\n", what, (int)r, cufft_name(r));
  fflush(stdout);
  return r == CUFFT_SUCCESS;
}

/* CUDA runtime calls outside the cuFFT calls under test: fatal. */
#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      printf("FATAL %s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      fflush(stdout);                                                                \
      exit(3);                                                                       \
    }                                                                                \
  } while (0)

static double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/* ---- the callbacks -------------------------------------------------------- */

/* info (device, 3 words): [0] bins per row m, [1] 1 for even n, [2] the
 * caller's spectrum (load callbacks). The signatures are cuFFT's LTO ones
 * (cufftJITCallbackStoreC/Z, cufftJITCallbackLoadC/Z in cufftXt.h):
 * cufftComplex is float2, cufftDoubleComplex double2. BK_CB_LINK is
 * extern "C" or empty. */
static const char *cb_body = R"(
BK_CB_LINK __device__ void bk_store_c(void *out, unsigned long long off, float2 v, void *info,
                                      void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0f;
  ((float2 *)out)[off] = v;
}
BK_CB_LINK __device__ void bk_store_z(void *out, unsigned long long off, double2 v, void *info,
                                      void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0;
  ((double2 *)out)[off] = v;
}
BK_CB_LINK __device__ float2 bk_load_c(void *in, unsigned long long off, void *info, void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  float2 v = ((const float2 *)p[2])[off];
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0f;
  return v;
}
BK_CB_LINK __device__ double2 bk_load_z(void *in, unsigned long long off, void *info, void *sh) {
  const unsigned long long *p = (const unsigned long long *)info;
  double2 v = ((const double2 *)p[2])[off];
  const unsigned long long k = off % p[0];
  if (k == 0 || (p[1] && k == p[0] - 1)) v.y = 0.0;
  return v;
}
)";

static std::string cb_source(bool externc) {
  return std::string(externc ? "#define BK_CB_LINK extern \"C\"\n" : "#define BK_CB_LINK\n") +
         cb_body;
}

/* ---- routes --------------------------------------------------------------- */

enum { SRC_NVRTC, SRC_FILE };
enum { PLAN_MANY64, PLAN_XT };

struct route {
  const char *name;
  int src;            /* SRC_NVRTC: compiled here; SRC_FILE: DIR/file built by nvcc */
  bool externc;       /* NVRTC: the callbacks' linkage */
  const char *opts;   /* NVRTC options, space separated */
  const char *file;   /* SRC_FILE */
  int plan;           /* cufftMakePlanMany64 or cufftXtMakePlanMany */
  bool autoalloc;     /* cufftSetAutoAllocation(1), or 0 + cufftSetWorkArea */
  const char *what;
};

static const route routes[] = {
    {"nvrtc-externC-sm90", SRC_NVRTC, true, "-arch=sm_90 -dlto -rdc=true", NULL, PLAN_MANY64, true,
     "the first version's route (baseline: failed with 5 on the H200)"},
    {"nvrtc-cxx-sm90", SRC_NVRTC, false, "-arch=sm_90 -dlto -rdc=true", NULL, PLAN_MANY64, true,
     "NVRTC LTO-IR, callbacks with C++ linkage"},
    {"nvrtc-cxx-compute90", SRC_NVRTC, false, "-arch=compute_90 -dlto -rdc=true", NULL,
     PLAN_MANY64, true, "same, -arch=compute_90"},
    {"nvrtc-cxx-sm90-xtplan", SRC_NVRTC, false, "-arch=sm_90 -dlto -rdc=true", NULL, PLAN_XT, true,
     "C++ linkage, planned by cufftXtMakePlanMany"},
    {"nvcc-fatbin-cxx", SRC_FILE, false, NULL, "cb_cxx.fatbin", PLAN_MANY64, true,
     "nvcc -gencode arch=compute_90,code=lto_90 -dc -fatbin, C++ linkage, read from a file"},
    {"nvcc-fatbin-externC", SRC_FILE, true, NULL, "cb_c.fatbin", PLAN_MANY64, true,
     "same fatbin with extern \"C\" callbacks"},
    {"nvcc-dlto-obj-cxx", SRC_FILE, false, NULL, "cb_cxx.o", PLAN_MANY64, true,
     "nvcc -arch=sm_90 -dlto -dc host object (fatbin inside), C++ linkage"},
    {"nvcc-fatbin-cxx-workarea", SRC_FILE, false, NULL, "cb_cxx.fatbin", PLAN_MANY64, false,
     "fatbin, C++ linkage, the library's mode: no auto-allocation, cufftSetWorkArea"},
    {"nvcc-fatbin-externC-xtplan", SRC_FILE, true, NULL, "cb_c.fatbin", PLAN_XT, true,
     "extern \"C\" fatbin planned by cufftXtMakePlanMany"},
};
static const int nroutes = sizeof routes / sizeof routes[0];

static const route *find_route(const char *name) {
  for (int i = 0; i < nroutes; i++)
    if (strcmp(routes[i].name, name) == 0) return &routes[i];
  return NULL;
}

/* The callback code of a route: NVRTC LTO-IR or the bytes of an nvcc file. */
static bool route_code(const route *r, const char *dir, std::vector<char> *code) {
  const double t0 = now_ms();
  if (r->src == SRC_NVRTC) {
#ifdef BK_MINIMAL
    (void)t0;
    printf("    callback code: NVRTC routes are not in the BK_MINIMAL build\n");
    return false;
#else
    std::string src = cb_source(r->externc);
    std::vector<std::string> opt_s;
    {
      std::string o = r->opts;
      size_t p = 0;
      while (p < o.size()) {
        size_t q = o.find(' ', p);
        if (q == std::string::npos) q = o.size();
        if (q > p) opt_s.push_back(o.substr(p, q - p));
        p = q + 1;
      }
    }
    std::vector<const char *> opts;
    for (auto &s : opt_s) opts.push_back(s.c_str());
    nvrtcProgram prog;
    nvrtcResult e = nvrtcCreateProgram(&prog, src.c_str(), "bk_fft_callbacks.cu", 0, NULL, NULL);
    if (e != NVRTC_SUCCESS) {
      printf("    nvrtcCreateProgram -> %s\n", nvrtcGetErrorString(e));
      return false;
    }
    e = nvrtcCompileProgram(prog, (int)opts.size(), opts.data());
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::vector<char> log(n + 1, 0);
    nvrtcGetProgramLog(prog, log.data());
    if (e != NVRTC_SUCCESS) {
      printf("    nvrtcCompileProgram(%s) -> %s\n%s\n", r->opts, nvrtcGetErrorString(e), log.data());
      nvrtcDestroyProgram(&prog);
      return false;
    }
    e = nvrtcGetLTOIRSize(prog, &n);
    if (e != NVRTC_SUCCESS) {
      printf("    nvrtcGetLTOIRSize -> %s\n", nvrtcGetErrorString(e));
      nvrtcDestroyProgram(&prog);
      return false;
    }
    code->resize(n);
    nvrtcGetLTOIR(prog, code->data());
    nvrtcDestroyProgram(&prog);
    printf("    callback code: NVRTC %s (%s): %zu bytes of LTO-IR in %.1f ms\n", r->opts,
           r->externc ? "extern \"C\"" : "C++ linkage", code->size(), now_ms() - t0);
#endif
  } else {
    std::string path = std::string(dir) + "/" + r->file;
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) {
      printf("    callback code: cannot open %s (its nvcc step failed?)\n", path.c_str());
      return false;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    code->resize(n > 0 ? n : 0);
    size_t got = fread(code->data(), 1, code->size(), f);
    fclose(f);
    if (n <= 0 || got != (size_t)n) {
      printf("    callback code: reading %s failed\n", path.c_str());
      return false;
    }
    printf("    callback code: %s, %zu bytes (%s)\n", path.c_str(), code->size(),
           r->externc ? "extern \"C\"" : "C++ linkage");
  }
  return true;
}

/* ---- env ------------------------------------------------------------------ */

static void print_loaded(const char *label, void *sym) {
  Dl_info di;
  if (sym && dladdr(sym, &di) && di.dli_fname)
    printf("  %-12s loaded from %s\n", label, di.dli_fname);
  else
    printf("  %-12s path unknown\n", label);
}

static int mode_env() {
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  printf("  CUDA driver API %d, runtime %d\n", drv, rt);
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) printf("  cudaGetDeviceCount -> %s\n", cudaGetErrorString(e));
  for (int d = 0; d < ndev; d++) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) == cudaSuccess)
      printf("  device %d: %s, sm_%d%d, %zu MiB\n", d, p.name, p.major, p.minor,
             p.totalGlobalMem >> 20);
  }
  int v = 0, ma = 0, mi = 0, pa = 0;
  cufftGetVersion(&v);
  cufftGetProperty(MAJOR_VERSION, &ma);
  cufftGetProperty(MINOR_VERSION, &mi);
  cufftGetProperty(PATCH_LEVEL, &pa);
  printf("  cuFFT version %d (%d.%d.%d); header %d\n", v, ma, mi, pa, CUFFT_VERSION);
  print_loaded("libcufft", (void *)&cufftCreate);
#ifndef BK_MINIMAL
  nvrtcVersion(&ma, &mi);
  printf("  NVRTC %d.%d (linked)\n", ma, mi);
  print_loaded("libnvrtc", (void *)&nvrtcVersion);
#else
  printf("  BK_MINIMAL build: NVRTC and nvJitLink not linked\n");
#endif
  /* cuFFT opens nvJitLink and NVRTC itself at planning of an LTO plan. */
  const char *libs[] = {"libnvJitLink.so.13", "libnvrtc.so.13", "libnvrtc-builtins.so.13.0"};
  for (const char *lib : libs) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      printf("  dlopen(%s) FAILED: %s\n", lib, dlerror());
      continue;
    }
    struct link_map *lm = NULL;
    dlinfo(h, RTLD_DI_LINKMAP, &lm);
    printf("  dlopen(%s) ok: %s\n", lib, lm && lm->l_name ? lm->l_name : "?");
    if (strstr(lib, "nvJitLink")) {
      typedef int (*ver_fn)(unsigned *, unsigned *);
      ver_fn f = (ver_fn)dlsym(h, "nvJitLinkVersion");
      unsigned a = 0, b = 0;
      if (f && f(&a, &b) == 0) printf("  nvJitLinkVersion %u.%u\n", a, b);
      else printf("  nvJitLinkVersion not found: %s\n", dlerror());
    }
  }
  const char *llp = getenv("LD_LIBRARY_PATH");
  printf("  LD_LIBRARY_PATH=%s\n", llp ? llp : "(unset)");
  /* A plain plan first, so that a failure below is the callback's. */
  if (ndev > 0) {
    cufftHandle p;
    long long dims[1] = {512};
    size_t w = 0;
    cf("cufftCreate (plain R2C 512 x 1000)", cufftCreate(&p));
    cf("cufftMakePlanMany64 (no callback)",
       cufftMakePlanMany64(p, 1, dims, NULL, 1, 0, NULL, 1, 0, CUFFT_R2C, 1000, &w));
    cufftDestroy(p);
  }
  return 0;
}

/* ---- linkcheck (no GPU) --------------------------------------------------- */

/* A caller of the four callbacks that declares them the way C++ code sees
 * them, compiled to LTO-IR and linked with the route's callback code. An
 * undefined reference in nvJitLink's log means cuFFT's own link of the same
 * names cannot succeed either. */
static const char *caller_src = R"(
extern __device__ void bk_store_c(void *, unsigned long long, float2, void *, void *);
extern __device__ void bk_store_z(void *, unsigned long long, double2, void *, void *);
extern __device__ float2 bk_load_c(void *, unsigned long long, void *, void *);
extern __device__ double2 bk_load_z(void *, unsigned long long, void *, void *);
extern "C" __global__ void bk_caller(void *a, void *b, void *info, unsigned long long i) {
  float2 c = bk_load_c(a, i, info, 0);
  double2 z = bk_load_z(b, i, info, 0);
  bk_store_c(a, i, c, info, 0);
  bk_store_z(b, i, z, info, 0);
}
)";

static int mode_linkcheck(const route *r, const char *dir) {
#ifdef BK_MINIMAL
  (void)r, (void)dir, (void)caller_src;
  printf("  linkcheck is not in the BK_MINIMAL build\n");
  return 2;
#else
  std::vector<char> code;
  if (!route_code(r, dir, &code)) return 2;
  nvrtcProgram prog;
  const char *opts[] = {"-arch=compute_90", "-dlto", "-rdc=true"};
  nvrtcCreateProgram(&prog, caller_src, "bk_caller.cu", 0, NULL, NULL);
  nvrtcResult e = nvrtcCompileProgram(prog, 3, opts);
  if (e != NVRTC_SUCCESS) {
    printf("    caller: nvrtcCompileProgram -> %s\n", nvrtcGetErrorString(e));
    return 2;
  }
  size_t n = 0;
  nvrtcGetLTOIRSize(prog, &n);
  std::vector<char> caller(n);
  nvrtcGetLTOIR(prog, caller.data());
  nvrtcDestroyProgram(&prog);

  nvJitLinkHandle h;
  const char *lopts[] = {"-arch=sm_90", "-lto"};
  nvJitLinkResult le = nvJitLinkCreate(&h, 2, lopts);
  if (le != NVJITLINK_SUCCESS) {
    printf("    nvJitLinkCreate -> %d\n", (int)le);
    return 2;
  }
  le = nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, caller.data(), caller.size(), "caller");
  printf("    nvJitLinkAddData(caller LTO-IR) -> %d\n", (int)le);
  le = nvJitLinkAddData(h, NVJITLINK_INPUT_ANY, code.data(), code.size(), "callbacks");
  printf("    nvJitLinkAddData(callback code, INPUT_ANY) -> %d\n", (int)le);
  nvJitLinkResult lc = le == NVJITLINK_SUCCESS ? nvJitLinkComplete(h) : le;
  if (le == NVJITLINK_SUCCESS) printf("    nvJitLinkComplete -> %d\n", (int)lc);
  size_t ls = 0;
  nvJitLinkGetErrorLogSize(h, &ls);
  if (ls > 1) {
    std::vector<char> log(ls + 1, 0);
    nvJitLinkGetErrorLog(h, log.data());
    printf("    nvJitLink error log:\n%s\n", log.data());
  }
  nvJitLinkGetInfoLogSize(h, &ls);
  if (ls > 1) {
    std::vector<char> log(ls + 1, 0);
    nvJitLinkGetInfoLog(h, log.data());
    printf("    nvJitLink info log:\n%s\n", log.data());
  }
  nvJitLinkDestroy(&h);
  printf("  linkcheck %s: %s\n", r->name,
         lc == NVJITLINK_SUCCESS ? "the C++ declarations resolve" : "LINK FAILS");
  return lc == NVJITLINK_SUCCESS ? 0 : 1;
#endif
}

/* ---- the library's passes and the checks ---------------------------------- */

template <typename R> struct cplx;
template <> struct cplx<float> { typedef float2 type; };
template <> struct cplx<double> { typedef double2 type; };

/* As real_bins_zero in src/cuda/fft.cu: one thread per row. */
template <typename R>
__global__ void zero_bins(R *y, long long batch, long long m, int even) {
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < batch;
       b += (long long)gridDim.x * blockDim.x) {
    y[2 * b * m + 1] = 0;
    if (even) y[2 * (b * m + m - 1) + 1] = 0;
  }
}
/* As spec_prepare (scale 1, whole-bin vectors). */
template <typename R>
__global__ void prepare(const R *spec, R *work, long long count, long long m, int even) {
  typedef typename cplx<R>::type C;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    const long long k = i % m;
    C v = __ldcs((const C *)spec + i);
    if (k == 0 || (even && k == m - 1)) v.y = 0;
    ((C *)work)[i] = v;
  }
}
template <typename R>
__global__ void fill(R *p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed ^ (unsigned)(i >> 32) * 0x9e3779b9u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = (R)((double)(h & 0xffffff) / 16777216.0 - 0.5);
  }
}
__device__ inline unsigned long long bits(float v) { return __float_as_uint(v); }
__device__ inline unsigned long long bits(double v) { return (unsigned long long)__double_as_longlong(v); }
/* res[0]: elements whose bits differ; res[1]: the largest |a - b| as the
 * bits of a double (ordered like the values, all >= 0). */
template <typename R>
__global__ void compare(const R *a, const R *b, long long n, unsigned long long *res) {
  unsigned long long cnt = 0;
  double mx = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const R x = a[i], y = b[i];
    if (bits(x) != bits(y)) {
      cnt++;
      double d = fabs((double)x - (double)y);
      if (!(d == d)) d = 1e300;
      mx = fmax(mx, d);
    }
  }
  if (cnt) {
    atomicAdd(&res[0], cnt);
    atomicMax(&res[1], (unsigned long long)__double_as_longlong(mx));
  }
}

template <typename R>
static std::string diff(const R *a, const R *b, long long n) {
  unsigned long long *res;
  CK(cudaMalloc((void **)&res, 2 * sizeof *res));
  CK(cudaMemset(res, 0, 2 * sizeof *res));
  compare<R><<<132 * 16, 256>>>(a, b, n, res);
  unsigned long long h[2];
  CK(cudaMemcpy(h, res, sizeof h, cudaMemcpyDeviceToHost));
  CK(cudaFree(res));
  char s[160];
  if (h[0] == 0) snprintf(s, sizeof s, "bitwise equal");
  else {
    double mx;
    memcpy(&mx, &h[1], sizeof mx);
    snprintf(s, sizeof s, "DIFFER in %llu of %lld values (max |diff| %.3g)", h[0], n, mx);
  }
  return s;
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

/* ---- plans ---------------------------------------------------------------- */

struct plan {
  cufftHandle h = 0;
  bool ok = false;
  bool xt = false;
  void *info[1] = {NULL}; /* caller_info, alive as long as the plan */
  void *work = NULL;      /* the work area when not auto-allocated */
  double make_ms = 0;
};

/* A 1-D batched real plan; with a callback (name non-NULL) set by
 * cufftXtSetJITCallback between cufftCreate and the planning call. Every
 * call is printed when verbose. */
static bool make_plan(plan *p, const route *r, const std::vector<char> *code, const char *name,
                      cufftXtCallbackType cbt, void *info, long long n, long long batch,
                      bool f32, bool inverse, bool verbose) {
  p->xt = r && r->plan == PLAN_XT;
  const bool autoalloc = !r || r->autoalloc;
  char what[160];
  cufftResult e = cufftCreate(&p->h);
  if (verbose) cf("cufftCreate", e);
  if (e != CUFFT_SUCCESS) return false;
  if (!autoalloc) {
    e = cufftSetAutoAllocation(p->h, 0);
    if (verbose) cf("cufftSetAutoAllocation(0)", e);
    if (e != CUFFT_SUCCESS) return false;
  }
  const double t0 = now_ms();
  if (name) {
    p->info[0] = info;
    e = cufftXtSetJITCallback(p->h, name, code->data(), code->size(), cbt, p->info);
    snprintf(what, sizeof what, "cufftXtSetJITCallback(\"%s\", %zu B)", name, code->size());
    if (verbose) cf(what, e);
    if (e != CUFFT_SUCCESS) return false;
  }
  long long dims[1] = {n};
  size_t ws = 0;
  const double t1 = now_ms();
  if (p->xt) {
    cudaDataType rt = f32 ? CUDA_R_32F : CUDA_R_64F, ct = f32 ? CUDA_C_32F : CUDA_C_64F;
    e = cufftXtMakePlanMany(p->h, 1, dims, NULL, 1, 0, inverse ? ct : rt, NULL, 1, 0,
                            inverse ? rt : ct, batch, &ws, ct);
    snprintf(what, sizeof what, "cufftXtMakePlanMany(%s %lld x %lld)",
             inverse ? (f32 ? "C2R" : "Z2D") : (f32 ? "R2C" : "D2Z"), batch, n);
  } else {
    cufftType t = inverse ? (f32 ? CUFFT_C2R : CUFFT_Z2D) : (f32 ? CUFFT_R2C : CUFFT_D2Z);
    e = cufftMakePlanMany64(p->h, 1, dims, NULL, 1, 0, NULL, 1, 0, t, batch, &ws);
    snprintf(what, sizeof what, "cufftMakePlanMany64(%s %lld x %lld)",
             inverse ? (f32 ? "C2R" : "Z2D") : (f32 ? "R2C" : "D2Z"), batch, n);
  }
  p->make_ms = now_ms() - t0;
  if (verbose) cf(what, e, now_ms() - t1);
  if (e != CUFFT_SUCCESS) return false;
  if (!autoalloc) {
    if (ws) CK(cudaMalloc(&p->work, ws));
    e = cufftSetWorkArea(p->h, p->work);
    snprintf(what, sizeof what, "cufftSetWorkArea(%zu B)", ws);
    if (verbose) cf(what, e);
    if (e != CUFFT_SUCCESS) return false;
  }
  p->ok = true;
  return true;
}

static void destroy(plan *p) {
  if (p->h) cufftDestroy(p->h);
  if (p->work) cudaFree(p->work);
  p->h = 0;
  p->work = NULL;
}

static cufftResult exec(const plan &p, bool f32, bool inverse, void *in, void *out) {
  if (p.xt) return cufftXtExec(p.h, in, out, inverse ? CUFFT_INVERSE : CUFFT_FORWARD);
  if (f32)
    return inverse ? cufftExecC2R(p.h, (cufftComplex *)in, (cufftReal *)out)
                   : cufftExecR2C(p.h, (cufftReal *)in, (cufftComplex *)out);
  return inverse ? cufftExecZ2D(p.h, (cufftDoubleComplex *)in, (cufftDoubleReal *)out)
                 : cufftExecD2Z(p.h, (cufftDoubleReal *)in, (cufftDoubleComplex *)out);
}

/* ---- one case: plain transform vs transform + pass vs callback ------------ */

/* Returns false when the callback plan or its run failed. verbose: print
 * every cuFFT call (route test); timed: time the three variants. */
template <typename R>
static bool run_case(const route *r, const std::vector<char> &code, bool inverse, long long batch,
                     long long n, bool verbose, bool timed) {
  const bool f32 = sizeof(R) == 4;
  const long long m = n / 2 + 1;
  const int even = n % 2 == 0;
  const char *label = inverse ? "irfft" : "rfft";
  const char *cbname = inverse ? (f32 ? "bk_load_c" : "bk_load_z") : (f32 ? "bk_store_c" : "bk_store_z");
  const cufftXtCallbackType cbt =
      inverse ? (f32 ? CUFFT_CB_LD_COMPLEX : CUFFT_CB_LD_COMPLEX_DOUBLE)
              : (f32 ? CUFFT_CB_ST_COMPLEX : CUFFT_CB_ST_COMPLEX_DOUBLE);
  if (verbose) printf("  %s %s %lld x %lld, callback %s\n", label, f32 ? "f32" : "f64", batch, n, cbname);

  const size_t real_b = (size_t)batch * n * sizeof(R), spec_b = (size_t)batch * m * 2 * sizeof(R);
  R *src, *work, *y0, *y1;
  unsigned long long *info;
  /* forward: src = x (real), y0/y1 spectra; inverse: src = spec, work =
   * prepared copy / scratch, y0/y1 signals. */
  CK(cudaMalloc((void **)&src, inverse ? spec_b : real_b));
  CK(cudaMalloc((void **)&work, inverse ? spec_b : 16));
  CK(cudaMalloc((void **)&y0, inverse ? real_b : spec_b));
  CK(cudaMalloc((void **)&y1, inverse ? real_b : spec_b));
  CK(cudaMalloc((void **)&info, 3 * sizeof *info));
  unsigned long long hi[3] = {(unsigned long long)m, (unsigned long long)even,
                              (unsigned long long)(uintptr_t)src};
  CK(cudaMemcpy(info, hi, sizeof hi, cudaMemcpyHostToDevice));
  fill<R><<<1024, 256>>>(src, inverse ? batch * m * 2 : batch * n, inverse ? 2 : 1);
  CK(cudaDeviceSynchronize());

  plan plain, cb;
  bool ok = make_plan(&plain, r, NULL, NULL, CUFFT_CB_UNDEFINED, NULL, n, batch, f32, inverse,
                      false);
  if (!ok) printf("    the plain plan FAILED (no callback)\n");
  ok = ok && make_plan(&cb, r, &code, cbname, cbt, info, n, batch, f32, inverse, verbose);

  const long long count = batch * m;
  const unsigned grid = 132 * 32;
  auto pass = [&] {
    if (inverse) prepare<R><<<grid, 256>>>(src, work, count, m, even);
    else zero_bins<R><<<grid, 256>>>(y0, batch, m, even);
  };
  auto run_plain = [&] { /* the library's sequence */
    if (inverse) {
      pass();
      if (exec(plain, f32, true, work, y0) != CUFFT_SUCCESS) exit(4);
    } else {
      if (exec(plain, f32, false, src, y0) != CUFFT_SUCCESS) exit(4);
      pass();
    }
  };
  /* the callback's sequence: the inverse reads src through the callback and
   * runs on work as scratch */
  auto run_cb = [&] { return exec(cb, f32, inverse, inverse ? (void *)work : (void *)src, y1); };
  if (ok) {
    cufftResult e = run_cb();
    if (verbose) cf(inverse ? (f32 ? "cufftExecC2R" : "cufftExecZ2D") : (f32 ? "cufftExecR2C" : "cufftExecD2Z"), e);
    cudaError_t ce = cudaDeviceSynchronize();
    if (verbose || ce != cudaSuccess) printf("    cudaDeviceSynchronize -> %s\n", cudaGetErrorString(ce));
    if (ce != cudaSuccess) exit(5); /* the context is lost: end this process */
    ok = e == CUFFT_SUCCESS;
  }
  if (ok) {
    run_plain();
    CK(cudaDeviceSynchronize());
    const std::string d = inverse ? diff<R>(y0, y1, batch * n) : diff<R>(y0, y1, batch * m * 2);
    if (!timed) {
      printf("    result vs transform + pass: %s; callback plan made in %.1f ms\n", d.c_str(),
             cb.make_ms);
    } else {
      const float t_plain = time_ms([&] {
        if (exec(plain, f32, inverse, inverse ? (void *)work : (void *)src, y0) != CUFFT_SUCCESS) exit(4);
      });
      const float t_pass = time_ms(pass);
      const float t_both = time_ms(run_plain);
      const float t_cb = time_ms([&] { if (run_cb() != CUFFT_SUCCESS) exit(4); });
      printf("%-5s %s %8lld x %-5lld plain %8.4f  pass %7.4f  plain+pass %8.4f  callback %8.4f ms"
             "  (%.2fx)  %s  plans %.0f / %.0f ms\n",
             label, f32 ? "f32" : "f64", batch, n, t_plain, t_pass, t_both, t_cb, t_both / t_cb,
             d.c_str(), plain.make_ms, cb.make_ms);
    }
  } else if (timed) {
    printf("%-5s %s %8lld x %-5lld callback plan or run FAILED\n", label, f32 ? "f32" : "f64",
           batch, n);
  }
  fflush(stdout);
  destroy(&plain);
  destroy(&cb);
  cudaFree(src);
  cudaFree(work);
  cudaFree(y0);
  cudaFree(y1);
  cudaFree(info);
  return ok;
}

static int mode_route(const route *r, const char *dir, bool bench) {
  std::vector<char> code;
  if (!route_code(r, dir, &code)) return 2;
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  /* Small shapes, even and odd n, every callback type. */
  int good = 0;
  good += run_case<float>(r, code, false, 4096, 56, true, false);
  good += run_case<double>(r, code, false, 4096, 57, true, false);
  good += run_case<float>(r, code, true, 4096, 60, true, false);
  good += run_case<double>(r, code, true, 4096, 63, true, false);
  printf("  route %s: %d of 4 callback plans made and run\n", r->name, good);
  fflush(stdout);
  if (good == 0) return 1;
  if (!bench) return good == 4 ? 0 : 6; /* 6: some of the four work */

  printf("\n== timing with route %s (median of 9 bursts of 5, CUDA events) ==\n", r->name);
  printf("plain = cuFFT alone; pass = real_bins_zero (rfft) or spec_prepare (irfft) alone;\n"
         "plain+pass = the library's sequence; callback = cuFFT with the callback;\n"
         "(x) = plain+pass / callback; equality of callback vs plain+pass results\n");
  fflush(stdout);
  const long long shapes[][2] = {{1452927, 56}, {262144, 512}, {65536, 4096}, {8192, 3000}};
  for (int inv = 0; inv < 2; inv++)
    for (int f = 0; f < 2; f++)
      for (auto &s : shapes) {
        if (f == 0) run_case<float>(r, code, inv, s[0], s[1], false, true);
        else run_case<double>(r, code, inv, s[0], s[1], false, true);
      }
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "env") == 0) return mode_env();
  if (strcmp(mode, "list") == 0) {
    for (int i = 0; i < nroutes; i++) printf("%s\n", routes[i].name);
    return 0;
  }
  if (strcmp(mode, "describe") == 0 && argc > 2) {
    const route *r = find_route(argv[2]);
    printf("%s\n", r ? r->what : "?");
    return r ? 0 : 2;
  }
  if (strcmp(mode, "emit") == 0 && argc > 2) {
    fputs(cb_source(strcmp(argv[2], "c") == 0).c_str(), stdout);
    return 0;
  }
  if ((strcmp(mode, "linkcheck") == 0 || strcmp(mode, "route") == 0) && argc > 3) {
    const route *r = find_route(argv[2]);
    if (!r) {
      printf("unknown route %s\n", argv[2]);
      return 2;
    }
    if (mode[0] == 'l') return mode_linkcheck(r, argv[3]);
    return mode_route(r, argv[3], argc > 4 && strcmp(argv[4], "--bench") == 0);
  }
  fprintf(stderr,
          "usage: %s env | list | describe R | emit c|cxx | linkcheck R DIR | route R DIR "
          "[--bench]\n",
          argv[0]);
  return 2;
}
