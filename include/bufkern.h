/*
 * bufkern.h — tensor-buffer primitives for ML runtimes.
 *
 * This header is the specification of the library. Every function documents
 * its shapes, ownership, synchronization and the statuses it returns.
 *
 * Conventions that hold for every function below:
 *
 *  - A bk_buffer is an opaque, reference-counted handle to one flat,
 *    contiguous, row-major array with a dtype, a length in elements and a
 *    device. Shapes are never stored in the buffer: each primitive takes its
 *    geometry explicitly and checks that every buffer length equals the
 *    product of the dims it is described by.
 *  - Inputs are borrowed (const bk_buffer *): never retained, freed or
 *    written. Every result is a new buffer owned by the caller, returned
 *    through a trailing out-parameter that is written only on success. On
 *    failure every out-parameter is set to NULL and nothing leaks. A NULL
 *    out-parameter is BK_ERR_NULL naming it, after every other out-parameter
 *    has been set to NULL.
 *  - Out-parameters are write-only: the library never reads what a slot
 *    holds, so an uninitialized variable is a valid slot, and it never
 *    releases a handle it finds there. Two out-parameters of one call that
 *    are the same slot (or, for bk_bmm_scaled, a range_loss overlapping
 *    out) are BK_ERR_INVALID_ARGUMENT naming both, reported before anything
 *    is allocated and after a NULL out-parameter: one slot cannot hold two
 *    results without losing one. An out-parameter may be the address of
 *    the caller's variable that holds an input, as in
 *    bk_softmax(ctx, x, dims, rank, axis, &x): inputs are passed by value,
 *    so the call reads the input as passed, and the variable then holds the
 *    result (NULL after a failure). The input's handle is not released: the
 *    caller must keep another reference to release it, as with any input.
 *    Detecting this case would require reading slots the caller may leave
 *    uninitialized, and releasing the input would take a reference the
 *    caller did not give.
 *  - All numeric buffers of one call share one dtype (masks and weights
 *    included); a mismatch is BK_ERR_DTYPE. Results keep that dtype.
 *  - A primitive runs on the device of its inputs. All inputs must live on
 *    one device and the context must be for that device, else
 *    BK_ERR_DEVICE_MISMATCH. A NULL context means the calling thread's
 *    default context for the inputs' device.
 *  - Sizes are int64_t; a negative size is BK_ERR_INVALID_ARGUMENT; every
 *    product of sizes is overflow-checked (an overflow is
 *    BK_ERR_INVALID_ARGUMENT). Flags documented as 0/1 reject other values.
 *  - Every integer argument accepts its type's whole range: ranks, axes and
 *    depths (int), sizes, strides, paddings, dilations, groups, counts and
 *    positions (int64_t) are compared and combined only through
 *    overflow-checked arithmetic (an axis is checked as 0 <= axis < rank,
 *    never by forming axis + 1), so any value is either a valid call or
 *    BK_ERR_INVALID_ARGUMENT naming the argument; a sum or product of
 *    arguments that leaves int64_t (a padded extent, a kernel span, a
 *    result length) is BK_ERR_INVALID_ARGUMENT as well, and so is a result
 *    whose byte size does not fit. The backends receive only geometry whose
 *    every intermediate is proven to fit.
 *  - Host index arrays are const uint64_t *; an index above UINT32_MAX is
 *    BK_ERR_INVALID_ARGUMENT.
 *  - Every fallible function returns bk_status (BK_OK is 0) and records a
 *    message for bk_last_error() naming the function, the argument and the
 *    offending values. The library never aborts, exits or prints.
 *  - Validation happens once, before dispatch, so every backend accepts and
 *    rejects exactly the same calls. Argument checks run before the device
 *    check, so an invalid call is rejected the same way on every machine.
 *  - CUDA work is queued on the context's stream and returns without waiting
 *    unless the function says "synchronizes".
 *  - Every primitive is deterministic: the same inputs on the same device and
 *    build give bitwise-identical results. Results of different backends agree
 *    within the tolerances of the accuracy section of the contract.
 *  - On the CPU the results are also the same for every number of OpenMP
 *    threads: the work is cut into units (rows, tiles, fixed blocks of rows)
 *    whose results do not depend on how they are shared out, and every sum
 *    has a layout fixed by the geometry alone. The exception is the products
 *    of bk_bmm and bk_bmm_scaled, and the convolutions bk_conv computes as
 *    matrix products, in a build with OpenBLAS: they are as repeatable
 *    across thread counts as OpenBLAS is, which may split a dot product
 *    differently for different thread counts (and computes it differently
 *    on processors of different kinds). Code paths chosen at run time for the
 *    processor (AVX2 or baseline x86-64) in bufkern's own kernels compute the
 *    same operations in the same order and give the same bits.
 *  - Zero-length buffers are valid everywhere and hold no device memory.
 *
 * Thread safety: a context is used by one thread at a time; buffers may be
 * read by many threads at once. Retain and release are thread-safe.
 *
 * Streams: work on a CUDA context is ordered on its stream. A buffer made on
 * one context and read through another (another stream) must be complete
 * first: call bk_context_synchronize on the producing context, as with any
 * two CUDA streams. bk_buffer_to_host and bk_buffer_copy with a NULL context
 * read on the stream of the context that made the buffer, so they need no
 * such step.
 */
#ifndef BUFKERN_H
#define BUFKERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BK_VERSION_MAJOR 0
#define BK_VERSION_MINOR 1
#define BK_VERSION_PATCH 0

/* Maximum rank of the rank-polymorphic primitives. */
#define BK_MAX_RANK 16

#if defined(__GNUC__) || defined(__clang__)
#define BK_NODISCARD __attribute__((warn_unused_result))
#else
#define BK_NODISCARD
#endif

#if defined(_WIN32)
#define BK_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define BK_API __attribute__((visibility("default")))
#else
#define BK_API
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/*
 * Status codes, grouped by hundreds: 1xx bad argument, 2xx unsupported,
 * 3xx resources, 4xx device or library failure, 9xx internal. Values are
 * appended, never renumbered. BK_STATUS_LIST is the single list the enum and
 * bk_status_string() are generated from.
 */
#define BK_STATUS_LIST(X)                                                      \
  X(BK_OK, 0, "ok")                                                            \
  X(BK_ERR_INVALID_ARGUMENT, 100, "invalid argument")                          \
  X(BK_ERR_DTYPE, 101, "dtype mismatch or unsupported dtype")                  \
  X(BK_ERR_DEVICE_MISMATCH, 102, "device mismatch")                            \
  X(BK_ERR_NULL, 103, "null pointer")                                          \
  X(BK_ERR_UNSUPPORTED, 200, "unsupported")                                    \
  X(BK_ERR_OUT_OF_MEMORY, 300, "out of memory")                                \
  X(BK_ERR_NO_DEVICE, 301, "no such device")                                   \
  X(BK_ERR_DEVICE, 400, "device or library failure")                           \
  X(BK_ERR_INTERNAL, 900, "internal error")

typedef enum bk_status {
#define BK_STATUS_ENUM_(name, value, text) name = value,
  BK_STATUS_LIST(BK_STATUS_ENUM_)
#undef BK_STATUS_ENUM_
} bk_status;

/* ------------------------------------------------------------------------ */
/* Dtypes, devices, handles                                                  */
/* ------------------------------------------------------------------------ */

/* Element types. BK_F32 and BK_F64 are supported by every primitive on every
 * backend. BK_BF16 and BK_F16 are reserved: every primitive rejects them
 * with BK_ERR_DTYPE. */
typedef enum bk_dtype { BK_F32 = 0, BK_F64 = 1, BK_BF16 = 2, BK_F16 = 3 } bk_dtype;

/* Device kinds use the DLPack codes. */
typedef enum bk_device_kind { BK_DEVICE_CPU = 1, BK_DEVICE_CUDA = 2 } bk_device_kind;

typedef struct bk_device {
  bk_device_kind kind;
  int32_t index; /* 0 for the CPU; the CUDA ordinal for a GPU. */
} bk_device;

/* Opaque handles. */
typedef struct bk_buffer bk_buffer;
typedef struct bk_context bk_context;

/* ------------------------------------------------------------------------ */
/* Library information and errors                                            */
/* ------------------------------------------------------------------------ */

/* "MAJOR.MINOR.PATCH". Static storage; never NULL. */
BK_API const char *bk_version(void);

/* Short text naming a status ("invalid argument"). Unknown values give
 * "unknown status". Static storage; never NULL. */
BK_API const char *bk_status_string(bk_status status);

/* The calling thread's message for its last failed call, e.g.
 * "bk_rows_gather: indices[3] = 4294967296 exceeds the index range (max
 * 4294967295)". Empty string when no call has failed on this thread. The text
 * is thread-local and valid until the thread's next failing call. A successful
 * call leaves the previous message in place. */
BK_API const char *bk_last_error(void);

/* Build facts, one line each of "key: value" ("backends: cpu cuda",
 * "blas: openblas", "openmp: yes"). Static storage. */
BK_API const char *bk_build_info(void);

/* ------------------------------------------------------------------------ */
/* Contexts                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * A context holds a device, its stream, library handles (cuBLAS, cuFFT plan
 * cache, cuDNN), scratch memory and caches. Creates a new context for
 * `device`; *out is owned by the caller and freed with bk_context_destroy.
 * Buffers made through a context keep what they need of it alive, so a
 * buffer may outlive the context that made it.
 *
 * Returns BK_ERR_NULL (out NULL), BK_ERR_INVALID_ARGUMENT (unknown kind, or a
 * CPU index other than 0, or a negative index), BK_ERR_UNSUPPORTED (a CUDA
 * device in a build without CUDA), BK_ERR_NO_DEVICE (a CUDA index with no GPU
 * behind it), BK_ERR_OUT_OF_MEMORY, BK_ERR_DEVICE.
 */
BK_API BK_NODISCARD bk_status bk_context_create(bk_device device, bk_context **out);

/* Releases the caller's hold on a context. Work already queued completes.
 * NULL is a no-op. Destroying a thread's default context is not allowed (it
 * is not the caller's). */
BK_API void bk_context_destroy(bk_context *ctx);

/* Makes the context queue its work on a caller's cudaStream_t. NULL means
 * CUDA's legacy default stream, as it does for cuBLAS, cuFFT and cuDNN (and
 * as PyTorch reports its default stream: torch.cuda.current_stream()
 * .cuda_stream is 0 there); cudaStreamLegacy ((void *)1) and
 * cudaStreamPerThread ((void *)2) are accepted. bk_context_reset_stream
 * returns to the context's own stream. Synchronizes when the stream changes:
 * work already queued on the previous stream completes before the call
 * returns, so later work on the new stream may read its results. The caller
 * keeps ownership of the stream and must keep it alive while the context
 * and the buffers it made are in use. Returns BK_ERR_NULL (ctx NULL),
 * BK_ERR_UNSUPPORTED on a CPU context, or while the current stream is
 * being captured into a CUDA graph (it cannot be drained then; the context
 * stays on it). */
BK_API BK_NODISCARD bk_status bk_context_set_stream(bk_context *ctx, void *cuda_stream);

/* Makes a CUDA context queue its work on its own non-blocking stream again
 * (the stream it was created with), with the same synchronization as
 * bk_context_set_stream when the stream changes. On a CPU context, which
 * has no streams, it does nothing and returns BK_OK. Returns BK_ERR_NULL
 * (ctx NULL), BK_ERR_UNSUPPORTED while the current stream is being
 * captured. */
BK_API BK_NODISCARD bk_status bk_context_reset_stream(bk_context *ctx);

/*
 * CUDA graphs. Every primitive queued on a caller's stream (set with
 * bk_context_set_stream) may be recorded with cudaStreamBeginCapture /
 * cudaStreamEndCapture on that stream and the graph replayed with
 * cudaGraphLaunch; a replay computes bitwise what the captured calls
 * computed on the inputs' contents at replay time. The rules:
 *  - Buffers made during the capture (outputs and scratch) are the graph's
 *    stream-ordered allocation nodes. A buffer made and released during the
 *    capture is a temporary of the graph: each replay allocates and frees
 *    it, and nothing leaks across replays. A buffer made during the capture
 *    and kept (an output such as a loss) holds the graph's memory: the
 *    graph must be instantiated with cudaGraphInstantiateFlagAutoFreeOnLaunch
 *    so that each replay reuses that memory (every replay writes the same
 *    buffer); read it after a replay, and release it once, after the last
 *    replay that writes it, on the stream it was made on.
 *  - Buffers made before the capture are released after it (a release
 *    during the capture would become part of the graph). The addresses a
 *    replay reads are those of the inputs at capture time: to feed new
 *    data, write it into those buffers between replays.
 *  - Host data passed to a captured call (bk_buffer_from_host, the host
 *    indices of bk_rows_gather and bk_rows_scatter_add) is copied at capture
 *    time into the graph: every replay uses the values given at capture,
 *    whatever the host arrays hold later. Small data (up to 3840 bytes, and
 *    every bk_buffer_from_host) travels in the graph's kernel parameters;
 *    larger host indices are copied during the capture call into device
 *    memory the graph owns (a CUDA user object, not an allocation node of
 *    the graph). That memory is freed once the graph and every executable
 *    graph instantiated from it are destroyed: by the context's next call
 *    that allocates, or when the context is destroyed.
 *  - Calls that wait for the device are refused while the context's stream
 *    is being captured, with BK_ERR_UNSUPPORTED and nothing queued, so the
 *    capture stays valid: bk_buffer_to_host (and bk_buffer_copy to the
 *    CPU), bk_context_synchronize, bk_context_set_stream /
 *    bk_context_reset_stream, and bk_bmm_scaled (its range-loss flag is
 *    read on the host).
 *  - Library state is made on first use, which cannot be captured: the
 *    context's cuBLAS handle (bk_bmm), its cuDNN handle and plans (bk_conv),
 *    cuFFT plans (bk_rfft, bk_irfft, per n and batch, for n > 32). A call that would
 *    create them during a capture is refused with BK_ERR_UNSUPPORTED; run
 *    each shape once before capturing it. A cuFFT plan used by a capture
 *    stays in the context until the context is destroyed.
 *  - Destroy the graph before the context that made its calls, and keep
 *    the context alive while the graph is replayed.
 */

/* Waits until all work queued on the context has completed. Synchronizes.
 * NULL means the calling thread's default CPU context (a no-op). */
BK_API BK_NODISCARD bk_status bk_context_synchronize(bk_context *ctx);

/* The context's device. NULL gives the CPU device. */
BK_API bk_device bk_context_device(const bk_context *ctx);

/* Number of CUDA devices visible; 0 in a build without CUDA or when the
 * driver reports none. */
BK_API int bk_cuda_device_count(void);

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------ */

/* A new buffer of `length` zeros on ctx's device (NULL: the thread's CPU
 * context). Returns BK_ERR_NULL, BK_ERR_INVALID_ARGUMENT (negative length,
 * byte size overflow), BK_ERR_DTYPE, BK_ERR_OUT_OF_MEMORY, BK_ERR_DEVICE. */
BK_API BK_NODISCARD bk_status bk_buffer_zeros(bk_context *ctx, bk_dtype dtype, int64_t length,
                                              bk_buffer **out);

/* A new buffer on ctx's device holding a copy of `length` host elements of
 * `dtype` at `data` (which may be NULL only when length is 0). The host array
 * may be reused as soon as the call returns. Same statuses as
 * bk_buffer_zeros. */
BK_API BK_NODISCARD bk_status bk_buffer_from_host(bk_context *ctx, bk_dtype dtype,
                                                  const void *data, int64_t length,
                                                  bk_buffer **out);

/* Copies the buffer's elements to host memory. Requires length ==
 * bk_buffer_length(buf); data may be NULL only when length is 0.
 * Synchronizes: the data is in place when the call returns. ctx NULL means
 * the default context of the buffer's device. Returns BK_ERR_NULL,
 * BK_ERR_INVALID_ARGUMENT (length), BK_ERR_DEVICE_MISMATCH, BK_ERR_DEVICE. */
BK_API BK_NODISCARD bk_status bk_buffer_to_host(bk_context *ctx, const bk_buffer *buf, void *data,
                                                int64_t length);

/* A new buffer on dst_ctx's device with a copy of src, which may be on any
 * device (CPU to GPU, GPU to CPU, GPU to GPU). dst_ctx NULL means the
 * thread's default CPU context. A copy from a GPU to the CPU synchronizes.
 * A copy between two different GPUs does not: it is queued on dst_ctx's
 * stream after the work already queued on the stream of the context that
 * made src (an event, no host wait), and that stream's later work waits for
 * the copy, so src may be released at once. It runs device to device where
 * the GPUs allow peer access (enabled for the pair on first use), else the
 * CUDA driver stages it through host memory. Within one GPU the copy is
 * queued on dst_ctx's stream as the stream rules above describe.
 * Returns BK_ERR_NULL, BK_ERR_OUT_OF_MEMORY, BK_ERR_DEVICE. */
BK_API BK_NODISCARD bk_status bk_buffer_copy(bk_context *dst_ctx, const bk_buffer *src,
                                             bk_buffer **out);

/* Adds a reference and returns buf (NULL gives NULL). Thread-safe. */
BK_API bk_buffer *bk_buffer_retain(bk_buffer *buf);

/* Drops a reference; the memory is freed with the last one. NULL is a no-op.
 * Thread-safe. Device memory is returned on the stream of the context that
 * made the buffer, after the work queued there. */
BK_API void bk_buffer_release(bk_buffer *buf);

/* Accessors; NULL gives BK_F32, 0 and the CPU device respectively. */
BK_API bk_dtype bk_buffer_dtype(const bk_buffer *buf);
BK_API int64_t bk_buffer_length(const bk_buffer *buf);
BK_API bk_device bk_buffer_device(const bk_buffer *buf);

/* The address of the first element (a device pointer for a GPU buffer), for
 * interop. NULL for a zero-length buffer. The library never writes through
 * it after the buffer was returned; a caller who writes into it breaks the
 * immutability that other holders rely on. */
BK_API void *bk_buffer_data(const bk_buffer *buf);

/* ------------------------------------------------------------------------ */
/* DLPack interchange                                                        */
/* ------------------------------------------------------------------------ */

/* DLPack's managed tensor (dlpack.h, DLPack 0.6 and later); declared here
 * so that this header does not require dlpack.h. */
struct DLManagedTensor;

/*
 * Wraps a DLPack tensor as a buffer without copying. On success the buffer
 * owns `tensor`: its deleter runs exactly once, when the last reference to
 * the buffer is released (for a tensor with zero elements, at once). On
 * failure ownership stays with the caller and the deleter is not called.
 * Accepted: dtype float32 or float64 with one lane, device kDLCPU or kDLCUDA,
 * a compact row-major layout (strides NULL, or equal to the row-major
 * strides wherever the extent is above 1); the buffer's length is the product
 * of the shape and its data starts at data + byte_offset. The library never
 * writes into an imported tensor. ctx may be NULL; when given, the tensor must
 * be on ctx's device. Returns BK_ERR_NULL, BK_ERR_DTYPE (other dtypes),
 * BK_ERR_UNSUPPORTED (other devices, or a CUDA tensor in a build without CUDA),
 * BK_ERR_INVALID_ARGUMENT (strided layout, negative extent, ndim outside
 * [0, BK_MAX_RANK], element count or byte size overflow, a byte_offset that
 * carries the elements past the end of the address space, a negative CUDA
 * device_id), BK_ERR_DEVICE_MISMATCH, BK_ERR_OUT_OF_MEMORY.
 */
BK_API BK_NODISCARD bk_status bk_buffer_from_dlpack(bk_context *ctx, struct DLManagedTensor *tensor,
                                                    bk_buffer **out);

/*
 * Exports a buffer as a 1-D DLPack tensor (shape {length}, strides NULL)
 * sharing its memory. The tensor holds a reference to the buffer; its
 * deleter (to be called once by the consumer) drops that reference. The
 * consumer must not write into the memory: buffers are immutable. Returns
 * BK_ERR_NULL, BK_ERR_OUT_OF_MEMORY.
 */
BK_API BK_NODISCARD bk_status bk_buffer_to_dlpack(const bk_buffer *buf,
                                                  struct DLManagedTensor **out);

/* ------------------------------------------------------------------------ */
/* 3.1 Softmax                                                               */
/* ------------------------------------------------------------------------ */

/*
 * Softmax along `axis` of the contiguous tensor `dims` (rank entries):
 * for every fibre along the axis, y = exp(x - m) / sum(exp(x - m)), m the
 * fibre maximum. *out has the shape and length of x.
 *
 * Empty tensor (some dim 0): empty result. A fibre holding NaN, +inf, or
 * only -inf yields NaN entries in that fibre. On the CPU each exponential is
 * evaluated once, in the dtype (float32 exponentials for float32 data,
 * within 2 ulp; an argument below -86, resp. -707 for float64, gives 0), the
 * sum of a fibre's exponentials is formed in float64 (for float32 from
 * float32 partial sums of at most 64 terms), and each output is its
 * exponential times the reciprocal of the sum: within a few float32
 * roundings of the exact value. bk_rows_masked_softmax and the
 * cross-entropies take their exponentials the same way.
 * Returns BK_ERR_NULL, BK_ERR_INVALID_ARGUMENT (rank 0 or above BK_MAX_RANK,
 * axis outside [0, rank), negative dim, length != product(dims)),
 * BK_ERR_DTYPE, BK_ERR_DEVICE_MISMATCH, BK_ERR_OUT_OF_MEMORY, BK_ERR_DEVICE.
 */
BK_API BK_NODISCARD bk_status bk_softmax(bk_context *ctx, const bk_buffer *x, const int64_t *dims,
                                         int rank, int axis, bk_buffer **out);

/* ------------------------------------------------------------------------ */
/* 3.2, 3.3 Cross-entropies                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Mean weighted logits cross-entropy. logits and weights are (rows, cols).
 * *out has length 1:
 *   L = (1/max(rows,1)) * sum_r sum_c w[r,c] * (lse_r - x[r,c]),
 *   lse_r = m_r + log(sum_c exp(x[r,c] - m_r)).
 * Each term is w * (lse - x); when (lse - x) is not finite the term is
 * recomputed as w*lse - w*x, so a zero weight contributes exactly 0.
 * rows == 0 gives 0; a row with cols == 0 contributes 0. Accumulation is in
 * float64 for both dtypes. In the recomputed term a zero factor times an
 * infinite one is 0, so a zero weight contributes exactly 0 even against a
 * -inf logit; a positive weight on a -inf logit gives +inf; a NaN anywhere in
 * a row gives NaN, whatever its weights. On CUDA, float64 exponentials of
 * arguments with |x| < 708 come from the library's own table-and-polynomial
 * exp (within 1.5 ulp of the exact value), the rest from CUDA's exp.
 */
BK_API BK_NODISCARD bk_status bk_xent_weighted_mean(bk_context *ctx, const bk_buffer *logits,
                                                    const bk_buffer *weights, int64_t rows,
                                                    int64_t cols, bk_buffer **out);

/*
 * Fixed-teacher cross-entropy (gradient == 0, *out length 1) or its student
 * gradient (gradient == 1, *out length rows*cols). student and teacher are
 * (rows, cols); p_r = softmax(teacher_r).
 *   loss = (1/max(rows,1)) * sum_r [ log sum_c exp(S - mS_r) - sum_c p*(S - mS_r) ]
 *   grad = (softmax(S_r) - p_r) / max(rows,1)
 * rows == 0 or cols == 0: loss 0, gradient empty. gradient other than 0/1
 * is BK_ERR_INVALID_ARGUMENT. A teacher probability of exactly 0 contributes
 * 0 even where the student logit is -inf, so entries masked to -inf in both
 * operands drop out (the loss stays finite, their gradient is +0); a student
 * -inf where the teacher has mass gives +inf; NaN propagates. Sums
 * accumulate in float64; on CUDA the loss of float32 data first sums its
 * terms in groups of at most eight in float32 (the terms of a group share
 * one sign, so each group is within a few float32 roundings), and float64
 * exponentials are computed as for bk_xent_weighted_mean. On CUDA the
 * gradient of wide rows (rows split across a cluster of thread blocks) is
 * formed as exp(x - m_b) * (exp(m_b - M) / Z / rows), with m_b the maximum
 * of the part of the row one block holds and M the row maximum (a few
 * roundings from exp(x - M) / Z / rows), and for float32 data each group of
 * four exponentials is summed in float32 before the float64 accumulation.
 */
BK_API BK_NODISCARD bk_status bk_xent_teacher(bk_context *ctx, const bk_buffer *student,
                                              const bk_buffer *teacher, int64_t rows,
                                              int64_t cols, int gradient, bk_buffer **out);

/* ------------------------------------------------------------------------ */
/* 3.4 Grouped convolution                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Grouped convolution over a spatial suffix (cross-correlation, as in ML
 * frameworks), with stride, dilation and asymmetric zero padding.
 *  - spatial_rank in 1..3; stride, pad_before, pad_after, dilation have
 *    spatial_rank entries; kernel_dims has spatial_rank + 2 entries.
 *  - input_dims = (batch axes..., C_in, s_1..s_r); the channel axis is
 *    input_rank - spatial_rank - 1 >= 0; axes before it fold into N (1 if
 *    none). input_rank <= BK_MAX_RANK.
 *  - kernel_dims = (C_out, C_in, k_1..k_r), the dense layout: output channel
 *    oc is in group g = oc / (C_out/groups) and reads only input channels
 *    g*(C_in/groups) .. (g+1)*(C_in/groups)-1; other blocks are never read.
 *  - out extent per axis = padded < eff ? 0 : (padded - eff)/stride + 1 with
 *    eff = (k-1)*dil + 1, padded = in + before + after.
 *  - bias has C_out entries, or is NULL for no bias.
 * *out is (N, C_out, out_1..out_r) row-major; an output volume of 0 gives an
 * empty result.
 * An input with no elements (C_in == 0 or a zero input extent) but a
 * nonempty output gives bias broadcast over (N, C_out, out...), or zeros
 * without a bias. The product of the batch axes is checked for overflow even
 * when another extent is 0. float32 data accumulates in float64 on the CPU
 * (in a build with OpenBLAS, a convolution of at least 2^20 multiply-adds
 * with 4 or more output channels and 16 or more (input channel, tap) pairs
 * per group is one float64 product per batch and group, cblas_dgemm over
 * the group's kernel block and the input columns its taps read);
 * on CUDA it accumulates in float32 (cuDNN engines without tensor cores,
 * never TF32, deterministic engines only: the first such engine of cuDNN's
 * heuristic order for the shape, so the bits depend on the shape, the GPU
 * and the cuDNN version and are the same run to run); depthwise
 * convolutions (groups == C_in; of 2 or 3 spatial axes only where C_in > 1
 * or C_out == 1) whose window fits the kernels' shared-memory tiles use the
 * library's own kernels, which sum each output's taps in index order in the
 * data's type and then add the bias.
 * Returns BK_ERR_INVALID_ARGUMENT for groups <= 0, C_in or C_out not
 * divisible by groups, kernel_dims[1] != C_in, k, stride or dilation <= 0,
 * negative padding, (k-1)*dil + 1 or in + before + after outside int64,
 * length mismatches; plus the usual statuses. Any stride, padding and
 * dilation within those bounds is valid, however large: with one tap
 * (k == 1) the dilation does not enter the result, and outputs whose
 * window lies in the padding are the bias (or 0).
 */
BK_API BK_NODISCARD bk_status bk_conv(bk_context *ctx, const bk_buffer *input,
                                      const bk_buffer *kernel, const bk_buffer *bias,
                                      const int64_t *input_dims, int input_rank,
                                      const int64_t *kernel_dims, int spatial_rank,
                                      const int64_t *stride, const int64_t *pad_before,
                                      const int64_t *pad_after, const int64_t *dilation,
                                      int64_t groups, bk_buffer **out);

/* ------------------------------------------------------------------------ */
/* 3.5 Row reductions and masks over flat (rows, cols) buffers               */
/* ------------------------------------------------------------------------ */

/* out[i] = sum_j x[i,j], length rows; cols == 0 gives rows zeros. float32
 * data is accumulated in float64 on both backends (on the CPU in 16
 * interleaved partial sums folded pairwise, in index order for rows shorter
 * than 40; a fixed tree of float64 partial sums on CUDA), deterministic. */
BK_API BK_NODISCARD bk_status bk_rows_sum(bk_context *ctx, const bk_buffer *x, int64_t rows,
                                          int64_t cols, bk_buffer **out);

/* out[i] = max_j x[i,j] ignoring NaN (an all-NaN row gives -inf), length
 * rows; cols == 0 gives rows zeros. Among equal maxima (-0 and +0) the
 * first in index order is returned. */
BK_API BK_NODISCARD bk_status bk_rows_max(bk_context *ctx, const bk_buffer *x, int64_t rows,
                                          int64_t cols, bk_buffer **out);

/* length rows*cols: per row a single 1 at the first maximal coordinate
 * (scan from 0, replace only on strictly greater), 0 elsewhere. Ties go to
 * the lowest index; a row of -inf or NaN selects index 0 unless a later
 * entry compares strictly greater: a NaN is never selected except at index
 * 0, where nothing can displace it. rows*cols == 0 gives an empty buffer. */
BK_API BK_NODISCARD bk_status bk_rows_first_max_mask(bk_context *ctx, const bk_buffer *x,
                                                     int64_t rows, int64_t cols,
                                                     bk_buffer **out);

/* length rows*cols: out[r,i] = 1 iff fewer than k entries of row r beat
 * entry i, where j beats i when x_j > x_i, or when neither is greater and
 * j < i (so NaN ties with everything by position). k == 0 gives zeros,
 * k >= cols ones; k < 0 is BK_ERR_INVALID_ARGUMENT. Exact. With NaN a row
 * may keep more or fewer than k: [1,NaN,2] keeps all three for k = 2 and none
 * for k = 1. -0 and +0 tie, so position decides. */
BK_API BK_NODISCARD bk_status bk_rows_topk_mask(bk_context *ctx, const bk_buffer *x, int64_t rows,
                                                int64_t cols, int64_t k, bk_buffer **out);

/* Hard-masked softmax: allowed <=> mask != 0 (NaN in the mask counts as
 * allowed, being != 0). Per row, max and denominator over allowed entries
 * only; blocked entries are exactly +0; a row with no allowed entry is all
 * zeros. Blocked scores never influence the result. Among the allowed
 * entries the IEEE rules of bk_softmax hold (a NaN or +inf among them, or
 * only -inf, makes every allowed entry NaN); a mask entry of -0 counts as
 * blocked. */
BK_API BK_NODISCARD bk_status bk_rows_masked_softmax(bk_context *ctx, const bk_buffer *scores,
                                                     const bk_buffer *mask, int64_t rows,
                                                     int64_t cols, bk_buffer **out);

/* ------------------------------------------------------------------------ */
/* 3.6 Vectors, broadcasts and layout                                        */
/* ------------------------------------------------------------------------ */

/* length n+m: a then b; len(a) == n, len(b) == m. */
BK_API BK_NODISCARD bk_status bk_vec_concat(bk_context *ctx, const bk_buffer *a,
                                            const bk_buffer *b, int64_t n, int64_t m,
                                            bk_buffer **out);

/* Copy of x[start, start+len); len(x) == n, start >= 0, len >= 0 and
 * start + len <= n (checked without overflow). */
BK_API BK_NODISCARD bk_status bk_vec_slice(bk_context *ctx, const bk_buffer *x, int64_t n,
                                           int64_t start, int64_t len, bk_buffer **out);

/* (rows, cols) with out[i,j] = vec[i]; len(vec) == rows. */
BK_API BK_NODISCARD bk_status bk_broadcast_col(bk_context *ctx, const bk_buffer *vec, int64_t rows,
                                               int64_t cols, bk_buffer **out);

/*
 * Broadcast x (shape in_dims) to out_dims. axis_map has out_rank entries:
 * axis_map[j] == 0 inserts output axis j (input coordinate 0); axis_map[j] ==
 * a+1 reads input axis a, at coordinate 0 when in_dims[a] == 1 and at the
 * output coordinate otherwise. Invalid: an entry outside [0, in_rank], an
 * input axis used twice or never, in_dims[a] neither 1 nor out_dims[j].
 * Input axes may be mapped in any order (a permutation is allowed).
 * in_rank and out_rank are each in [0, BK_MAX_RANK]; in_dims, out_dims and
 * axis_map may be NULL only when their rank is 0. With in_rank == out_rank ==
 * 0, x has one element and the result is a copy of it.
 */
BK_API BK_NODISCARD bk_status bk_broadcast_to(bk_context *ctx, const bk_buffer *x,
                                              const int64_t *in_dims, int in_rank,
                                              const int64_t *out_dims, int out_rank,
                                              const int64_t *axis_map, bk_buffer **out);

/* The sum-adjoint of bk_broadcast_to with the same geometry: din[i] is the
 * sum of dout[o] over every output coordinate o mapped to i, folded in
 * row-major order of the output, accumulated in float64 for both dtypes and
 * rounded once. On CUDA every geometry is summed as bk_sum_axis describes,
 * over each element's terms in that order: at most 16 terms fold as one
 * sequential chain; more may be cut into segments of consecutive terms,
 * each folded in order in float64, whose sums are added in order (a
 * segment may itself be cut the same way, its sub-segments' sums added in
 * order): deterministic and within the contract's tolerance, but not
 * always bit-identical to the CPU's single sequential fold. *out has
 * product(in_dims) elements. An
 * empty dout gives product(in_dims) zeros (the input can be non-empty when an
 * inserted output axis, or one reading an input axis of extent 1, has extent
 * 0). */
BK_API BK_NODISCARD bk_status bk_broadcast_to_adjoint(bk_context *ctx, const bk_buffer *dout,
                                                      const int64_t *in_dims, int in_rank,
                                                      const int64_t *out_dims, int out_rank,
                                                      const int64_t *axis_map, bk_buffer **out);

/* Transposes axes depth and depth+1 of the tensor dims; requires
 * 0 <= depth < rank - 1 (any other int, INT_MAX included, is
 * BK_ERR_INVALID_ARGUMENT). An empty tensor gives an empty result. */
BK_API BK_NODISCARD bk_status bk_swap_adjacent(bk_context *ctx, const bk_buffer *x,
                                               const int64_t *dims, int rank, int depth,
                                               bk_buffer **out);

/* Sum over `axis` (0 <= axis < rank), result row-major with the axis
 * removed. rank 0 returns a copy of the single element; a zero-extent axis
 * gives zeros. Summed in index order along the axis (float64 accumulation,
 * rounded once, on every backend). CUDA folds an axis of at most 16 terms
 * as one sequential chain; a longer one may be cut into segments of
 * consecutive terms, each folded in order, whose sums are added in order,
 * segments possibly cut again the same way (deterministic, within the
 * contract's tolerance, not always bit-identical to the CPU). For rank 0, axis must be 0 and the result is a copy. The result length is overflow-checked even when x is empty. */
BK_API BK_NODISCARD bk_status bk_sum_axis(bk_context *ctx, const bk_buffer *x,
                                          const int64_t *dims, int rank, int axis,
                                          bk_buffer **out);

/* ------------------------------------------------------------------------ */
/* 3.7 Layer normalization                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Per row of x (rows, cols): mu = mean, var = population variance,
 * inv_std = 1/sqrt(var + eps), normalized = (x - mu) * inv_std,
 * out = normalized * gamma + beta. gamma, beta have cols entries.
 * Results: out (rows, cols), normalized (rows, cols), inv_std (rows).
 * Statistics are as accurate as a two-pass float64 computation rounded to
 * the dtype. cols == 0, eps < 0 or non-finite eps is
 * BK_ERR_INVALID_ARGUMENT; rows == 0 gives empty results. On failure all
 * three out-parameters are NULL; a NULL out-parameter is BK_ERR_NULL naming
 * it. A row with zero variance and eps == 0 gives inv_std = +inf and NaN
 * normalized and out entries (IEEE 0 * inf); nothing is clamped.
 */
BK_API BK_NODISCARD bk_status bk_layernorm_forward(bk_context *ctx, const bk_buffer *x,
                                                   const bk_buffer *gamma, const bk_buffer *beta,
                                                   int64_t rows, int64_t cols, double eps,
                                                   bk_buffer **out, bk_buffer **normalized,
                                                   bk_buffer **inv_std);

/*
 * Layer-norm VJP from the saved values: g = dout * gamma; per row
 * S1 = sum g, S2 = sum g*normalized;
 * dx = inv_std/cols * (cols*g - S1 - normalized*S2) (rows, cols);
 * dgamma[j] = sum_i dout[i,j]*normalized[i,j]; dbeta[j] = sum_i dout[i,j]
 * (cols each, summed over rows in a fixed order: on the CPU in increasing
 * row order within at most 64 blocks of consecutive rows, whose number
 * depends only on rows and cols, the blocks' float64 partials then added in
 * block order; on CUDA, per-block partials over fixed sets of rows, folded
 * in a fixed grouping and order). cols == 0 is
 * BK_ERR_INVALID_ARGUMENT; rows == 0 gives empty dx and zero dgamma, dbeta.
 */
BK_API BK_NODISCARD bk_status bk_layernorm_backward(bk_context *ctx, const bk_buffer *dout,
                                                    const bk_buffer *normalized,
                                                    const bk_buffer *inv_std,
                                                    const bk_buffer *gamma, int64_t rows,
                                                    int64_t cols, bk_buffer **dx,
                                                    bk_buffer **dgamma, bk_buffer **dbeta);

/* ------------------------------------------------------------------------ */
/* 3.8 Batched matrix products                                               */
/* ------------------------------------------------------------------------ */

/*
 * C = op(A) op(B): logical (batch,m,n) x (batch,n,p) -> (batch,m,p). With
 * trans_a == 1, A is stored (batch,n,m); with trans_b == 1, B is stored
 * (batch,p,n). No transposed copy is made. n == 0 gives zeros. Never uses
 * reduced-precision modes (no TF32). Flags other than 0/1 are
 * BK_ERR_INVALID_ARGUMENT. On the CPU, products go through OpenBLAS when the
 * build has it (float32 data then accumulates in float32), otherwise through
 * blocked loops that accumulate in float64; on CUDA through cuBLAS, except
 * small products (n <= 32 and at most 16384 result entries), which one
 * kernel computes entry by entry with fused multiply-adds in the dtype, in
 * order of n.
 */
BK_API BK_NODISCARD bk_status bk_bmm(bk_context *ctx, const bk_buffer *A, const bk_buffer *B,
                                     int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a,
                                     int trans_b, bk_buffer **out);

/*
 * C = scale * op(A) op(B), scale finite and > 0. The scale is split between
 * the operands in exact powers of two so that a product whose true value is
 * representable does not overflow or underflow on the way.
 * *range_loss (an int, may not be NULL) is set to 1 when an input or result
 * entry is non-finite, a result entry has magnitude below the dtype's
 * smallest normal (exact zero included), or scale*n*max|A|*max|B| exceeds
 * the dtype's largest finite value; otherwise 0. An empty result (batch, m
 * or p zero) sets 0; n == 0 with a nonempty result gives zeros and sets 1
 * (zero is below the smallest normal). The flag tests the result entries as
 * stored in the dtype. Synchronizes once to read the flag. Not a certified
 * error bound. On failure *out is NULL and *range_loss is 0. On CUDA the
 * split is decided on the device without an extra synchronization: when no
 * partial product or sum can leave the normal range and scale is a normal
 * number of the dtype, the inputs are used as they are and scale multiplies
 * the result; otherwise exact power-of-two scaled copies of the operands are
 * made. Scratch memory the size of A and B is reserved either way.
 */
BK_API BK_NODISCARD bk_status bk_bmm_scaled(bk_context *ctx, const bk_buffer *A,
                                            const bk_buffer *B, int64_t batch, int64_t m,
                                            int64_t n, int64_t p, int trans_a, int trans_b,
                                            double scale, bk_buffer **out, int *range_loss);

/* ------------------------------------------------------------------------ */
/* 3.9 Real FFTs over a packed half spectrum                                 */
/* ------------------------------------------------------------------------ */

/* x (batch, n) -> (batch, n/2+1, 2) holding [re, im] of
 * X[k] = sum_t x[t] e^{-2 pi i k t / n}, k = 0..n/2 (unnormalized). n >= 1
 * (any n, odd and prime included); n == 0 is BK_ERR_INVALID_ARGUMENT;
 * batch == 0 gives an empty result. The imaginary parts of bin 0 and, for
 * even n, bin n/2 are stored as exact +0. On the CPU (all three transforms)
 * float32 data are transformed in float32 arithmetic, twiddles computed in
 * float64 and rounded once, and float64 data in float64; a row's result
 * depends only on that row, bitwise the same for any batch and thread count.
 * On CUDA rows of at most 32 points are transformed the same way (directly,
 * in the data's type, twiddles from float64), each row's result bitwise the
 * same for any batch; longer rows go through cuFFT. */
BK_API BK_NODISCARD bk_status bk_rfft(bk_context *ctx, const bk_buffer *x, int64_t batch,
                                      int64_t n, bk_buffer **out);

/* Inverse of bk_rfft with the 1/n factor: spec (batch, n/2+1, 2) -> (batch,
 * n). The imaginary parts of bin 0 and, for even n, bin n/2 are ignored:
 * their values, NaN and infinities included, do not affect the result. On
 * CUDA the 1/n factor is applied in float64 and rounded once: for rows of at
 * most 32 points to each result, for longer rows to the spectrum as it is
 * copied for cuFFT's inverse transform. */
BK_API BK_NODISCARD bk_status bk_irfft(bk_context *ctx, const bk_buffer *spec, int64_t batch,
                                       int64_t n, bk_buffer **out);

/* bk_irfft without the 1/n factor (the transform itself, not a scaled
 * result); the adjoint of bk_rfft up to the packing weights: for real x (n)
 * and a half spectrum Y, sum_t x[t] * irfft_unnormalized(Y)[t] =
 * sum_k w_k (Re X_k Re Y_k + Im X_k Im Y_k) with X = rfft(x), w_k = 1 for bin
 * 0 and (even n) bin n/2, and 2 otherwise. */
BK_API BK_NODISCARD bk_status bk_irfft_unnormalized(bk_context *ctx, const bk_buffer *spec,
                                                    int64_t batch, int64_t n, bk_buffer **out);

/* ------------------------------------------------------------------------ */
/* 3.10 Diagonal selective scans                                             */
/* ------------------------------------------------------------------------ */

/* The scans compute in float64 for float32 data and round once. */

/* A, B, h0 (state); X (seq_len, state):
 * h[t,j] = A[j]*h[t-1,j] + B[j]*X[t,j], h[-1] = h0; *out (seq_len, state).
 * seq_len == 0 or state == 0: empty result. */
BK_API BK_NODISCARD bk_status bk_scan_diag(bk_context *ctx, const bk_buffer *A, const bk_buffer *B,
                                           const bk_buffer *X, const bk_buffer *h0,
                                           int64_t seq_len, int64_t state, bk_buffer **out);

/* Gradients of bk_scan_diag, with h read from `out` (its result):
 * g[t] = dy[t] + A*g[t+1] (g[seq_len] = 0); dA = sum_t g[t]*h[t-1],
 * dB = sum_t g[t]*X[t] (summed from t = seq_len-1 down to 0), dX[t] = g[t]*B,
 * dh0 = A*g[0]. dA, dB, dh0 have state entries, dX (seq_len, state).
 * h[t-1] is read from `out` as stored (h0 at t = 0), so the gradients are
 * those of the stored forward values. On CUDA the dA, dB sums are accumulated
 * in a fixed blocked order (per block of rows, then over blocks, latest time
 * first): deterministic, not strictly sequential, within the contract's
 * tolerance. Empty cases: empty dX and state zeros
 * for dA, dB, dh0. On failure all four out-parameters are NULL. */
BK_API BK_NODISCARD bk_status bk_scan_diag_backward(bk_context *ctx, const bk_buffer *A,
                                                    const bk_buffer *B, const bk_buffer *X,
                                                    const bk_buffer *h0, const bk_buffer *out,
                                                    const bk_buffer *dy, int64_t seq_len,
                                                    int64_t state, bk_buffer **dA,
                                                    bk_buffer **dB, bk_buffer **dX,
                                                    bk_buffer **dh0);

/* Token-dependent form: A, B, X (seq_len, state), h0 (state):
 * h[t,j] = A[t,j]*h[t-1,j] + B[t,j]*X[t,j]. */
BK_API BK_NODISCARD bk_status bk_scan_diag_var(bk_context *ctx, const bk_buffer *A,
                                               const bk_buffer *B, const bk_buffer *X,
                                               const bk_buffer *h0, int64_t seq_len,
                                               int64_t state, bk_buffer **out);

/* Gradients of bk_scan_diag_var: g[t] = dy[t] + A[t+1]*g[t+1];
 * dA[t] = g[t]*h[t-1], dB[t] = g[t]*X[t], dX[t] = g[t]*B[t],
 * dh0 = A[0]*g[0]. Empty cases: empty dA, dB, dX and state zeros for dh0. */
BK_API BK_NODISCARD bk_status bk_scan_diag_var_backward(bk_context *ctx, const bk_buffer *A,
                                                        const bk_buffer *B, const bk_buffer *X,
                                                        const bk_buffer *h0,
                                                        const bk_buffer *out,
                                                        const bk_buffer *dy, int64_t seq_len,
                                                        int64_t state, bk_buffer **dA,
                                                        bk_buffer **dB, bk_buffer **dX,
                                                        bk_buffer **dh0);

/* ------------------------------------------------------------------------ */
/* 3.11 Gather and scatter-add of rows (host indices)                        */
/* ------------------------------------------------------------------------ */

/* (k, cols): out[r,:] = mat[indices[r],:] when indices[r] < rows, else an
 * exact +0 row. indices may be NULL only when k == 0. An index above
 * UINT32_MAX is BK_ERR_INVALID_ARGUMENT, checked for every index even when
 * cols == 0 makes the result empty. The host array may be reused as soon as
 * the call returns. */
BK_API BK_NODISCARD bk_status bk_rows_gather(bk_context *ctx, const bk_buffer *mat, int64_t rows,
                                             int64_t cols, const uint64_t *indices, int64_t k,
                                             bk_buffer **out);

/* out = mat plus, for each r with indices[r] < rows, values[r,:] added into
 * row indices[r]; out-of-range indices are ignored; repeated indices fold in
 * increasing r onto the base row: ((mat[i] + v_first) + v_second) + ...
 * values is (k, cols). Deterministic (no atomics); each step rounds to the
 * dtype. rows == 0 or cols == 0 gives an empty result; k == 0 (indices may
 * then be NULL) gives a copy of mat. On CUDA up to 319 updates are ordered
 * on the host and travel in one kernel's parameters; more are uploaded and
 * grouped by destination on the device (a stable radix sort), and k is at
 * most 4294967294 there (BK_ERR_UNSUPPORTED beyond). */
BK_API BK_NODISCARD bk_status bk_rows_scatter_add(bk_context *ctx, const bk_buffer *mat,
                                                  const bk_buffer *values, int64_t rows,
                                                  int64_t cols, const uint64_t *indices,
                                                  int64_t k, bk_buffer **out);

/* ------------------------------------------------------------------------ */
/* Communicators: collectives across GPUs (NCCL)                             */
/* ------------------------------------------------------------------------ */

/*
 * A communicator joins CUDA contexts on distinct GPUs, in one process or
 * across processes, for collectives over NCCL. The communicator has
 * world_size ranks; the ranks of this process are its local ranks, numbered
 * 0..local_count-1 in this process (one process over n GPUs: n local ranks,
 * global rank i is local rank i; one process per GPU: one local rank).
 *
 * Collectives take one input buffer per local rank, in[i] on the device of
 * local rank i, and return one new buffer per local rank, out[i] made on
 * local rank i's context and queued on its stream (like every primitive:
 * out-of-place; inputs are never written). An input made on another context
 * of the same GPU needs no synchronization either: the collective waits for
 * the work queued on that context's stream (an event), and that stream's
 * later work waits for the collective, so inputs may be released at once.
 * DLPack imports carry no stream: they must be complete before the call. The
 * calls return without waiting for the transfer; results are read like any
 * buffer. In one process
 * the ranks' operations are issued as one NCCL group, so one thread drives
 * every GPU. Across processes every rank must make the same collective calls
 * in the same order with equal lengths and dtypes: NCCL cannot check what the
 * other processes pass, and a mismatch there is undefined (typically a hang
 * or BK_ERR_DEVICE); within one process the library checks it
 * (BK_ERR_INVALID_ARGUMENT for lengths, BK_ERR_DTYPE for dtypes).
 *
 * Statuses shared by every comm function: BK_ERR_UNSUPPORTED when the build
 * has no CUDA backend or no NCCL (every creation then fails this way, after
 * its argument checks, so no communicator can exist); BK_ERR_NULL for a NULL communicator, array or entry;
 * BK_ERR_DTYPE for dtypes other than f32/f64 or mismatched dtypes;
 * BK_ERR_DEVICE_MISMATCH for a buffer not on its local rank's device (a
 * buffer of a device outside the communicator included);
 * BK_ERR_OUT_OF_MEMORY; BK_ERR_DEVICE for an NCCL or CUDA failure, with
 * NCCL's text (ncclGetErrorString and ncclGetLastError) in bk_last_error().
 * On failure every out[i] is NULL and nothing leaks.
 *
 * Determinism: NCCL sums in an order fixed by its algorithm, protocol and
 * channel count, which it chooses from the world size, the device topology,
 * the message size and its environment. For a fixed world size, topology,
 * NCCL version and NCCL environment the results are bitwise repeatable run
 * to run; a one-rank communicator returns copies of its inputs. The library
 * does not change NCCL's environment; to pin the order independently of
 * NCCL's tuning set NCCL_ALGO=Ring and NCCL_PROTO=Simple before the first
 * communicator is made. Max is exact, so it is order independent.
 *
 * Thread safety: a communicator is used by one thread at a time, like its
 * contexts.
 */
typedef struct bk_comm bk_comm;

/* Reductions of the collectives. */
typedef enum bk_reduce_op { BK_REDUCE_SUM = 0, BK_REDUCE_MAX = 1 } bk_reduce_op;

/* Environment variables read by bk_comm_create_from_env, as launchers such
 * as torchrun set them. */
#define BK_ENV_RANK "BK_RANK"
#define BK_ENV_WORLD_SIZE "BK_WORLD_SIZE"
#define BK_ENV_COMM_ID_FILE "BK_COMM_ID_FILE"

/*
 * A communicator over n >= 1 CUDA contexts of this process, one per GPU
 * (ctxs[i] becomes rank i). The communicator retains the contexts (they may
 * be destroyed by the caller at once) and queues its work on their streams.
 * Synchronizes (NCCL's initialization waits for every rank). Returns
 * BK_ERR_NULL (ctxs, an entry, out), BK_ERR_INVALID_ARGUMENT (n < 1, two
 * contexts on one GPU: NCCL runs one rank per GPU), BK_ERR_UNSUPPORTED (a CPU
 * context, or a build without NCCL), BK_ERR_DEVICE.
 */
BK_API BK_NODISCARD bk_status bk_comm_create(bk_context *const *ctxs, int n, bk_comm **out);

/*
 * One rank of a communicator spanning world_size processes (one GPU each),
 * 0 <= rank < world_size. The ranks meet through id_file, a path every
 * process can reach (a local or shared file system): rank 0 creates NCCL's
 * unique id and writes it there (as hex text, atomically, by rename); every
 * other rank waits up to 120 seconds for the file and reads it. The file must
 * not exist when rank 0 starts (a file left by an earlier run would hand the
 * other ranks a stale id): rank 0 then fails with BK_ERR_INVALID_ARGUMENT.
 * The caller removes the file after the run. ctx is retained. Synchronizes
 * (every rank waits for all of them). Returns BK_ERR_NULL (ctx, id_file,
 * out), BK_ERR_INVALID_ARGUMENT (world_size < 1, rank outside [0,
 * world_size), the file exists at rank 0, an unreadable or malformed file,
 * the wait timed out), BK_ERR_UNSUPPORTED (a CPU context, a build without
 * NCCL), BK_ERR_DEVICE.
 */
BK_API BK_NODISCARD bk_status bk_comm_create_rank(bk_context *ctx, int rank, int world_size,
                                                  const char *id_file, bk_comm **out);

/*
 * bk_comm_create_rank with rank, world_size and id_file read from the
 * environment variables BK_RANK, BK_WORLD_SIZE and BK_COMM_ID_FILE (decimal
 * integers and a path). A missing or malformed variable is
 * BK_ERR_INVALID_ARGUMENT naming it; otherwise the statuses of
 * bk_comm_create_rank.
 */
BK_API BK_NODISCARD bk_status bk_comm_create_from_env(bk_context *ctx, bk_comm **out);

/*
 * Destroys *comm and sets *comm to NULL, so a later call through the same
 * handle is BK_ERR_NULL rather than a use of freed memory (copies of the
 * pointer made by the caller become invalid: using them is undefined). Waits
 * for the communicator's queued work on every local rank's stream first, then
 * releases its contexts. comm NULL or *comm NULL is a no-op. Across processes
 * every rank destroys its communicator.
 */
BK_API void bk_comm_destroy(bk_comm **comm);

/* Number of ranks of the communicator (all processes); 0 for NULL. */
BK_API int bk_comm_world_size(const bk_comm *comm);
/* Number of local ranks (this process's contexts); 0 for NULL. */
BK_API int bk_comm_local_count(const bk_comm *comm);
/* The global rank of local rank 0 (0 for a one-process communicator; the
 * process's rank for a one-rank-per-process one); -1 for NULL. */
BK_API int bk_comm_rank(const bk_comm *comm);

/*
 * The local rank of a context: *local = i when ctx is local rank i's context
 * or another context on the same GPU. Returns BK_ERR_NULL, and
 * BK_ERR_INVALID_ARGUMENT when ctx's device is not one of the communicator's
 * (a context not in the communicator; *local is then -1).
 */
BK_API BK_NODISCARD bk_status bk_comm_local_rank(const bk_comm *comm, const bk_context *ctx,
                                                 int *local);

/*
 * All-reduce: every in[i] has the same length L and dtype on every rank;
 * out[i] (length L) holds the element-wise sum or max over all ranks' inputs,
 * identical on every rank. in and out have bk_comm_local_count(comm)
 * entries. Returns the shared statuses and BK_ERR_INVALID_ARGUMENT (op not a
 * bk_reduce_op, lengths differ between local ranks).
 */
BK_API BK_NODISCARD bk_status bk_comm_all_reduce(bk_comm *comm, bk_reduce_op op,
                                                 const bk_buffer *const *in, bk_buffer **out);

/*
 * All-gather: every in[i] has length L; out[i] (world_size * L) holds rank
 * r's input in elements [r*L, (r+1)*L), identical on every rank. Returns the
 * shared statuses and BK_ERR_INVALID_ARGUMENT (lengths differ between local
 * ranks, world_size * L overflows).
 */
BK_API BK_NODISCARD bk_status bk_comm_all_gather(bk_comm *comm, const bk_buffer *const *in,
                                                 bk_buffer **out);

/*
 * Reduce-scatter: every in[i] has length world_size * L; out[i] on global
 * rank r (length L) holds elements [r*L, (r+1)*L) of the element-wise sum or
 * max over all ranks' inputs. Returns the shared statuses and
 * BK_ERR_INVALID_ARGUMENT (op, lengths differ between local ranks, a length
 * not a multiple of world_size).
 */
BK_API BK_NODISCARD bk_status bk_comm_reduce_scatter(bk_comm *comm, bk_reduce_op op,
                                                     const bk_buffer *const *in,
                                                     bk_buffer **out);

/*
 * Broadcast: out[i] on every rank is a copy of global rank root's input.
 * Every rank passes an input of the root's length and dtype (so that every
 * rank knows the message size); only the root's values are read. Returns the
 * shared statuses and BK_ERR_INVALID_ARGUMENT (root outside [0, world_size),
 * lengths differ between local ranks).
 */
BK_API BK_NODISCARD bk_status bk_comm_broadcast(bk_comm *comm, int root,
                                                const bk_buffer *const *in, bk_buffer **out);

#ifdef __cplusplus
}
#endif

#endif /* BUFKERN_H */
