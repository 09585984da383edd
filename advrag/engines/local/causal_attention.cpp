// Backward of causal attention (bf16, head size 64) on AMX block matmuls (ATen's cpublas::brgemm).
//
// Flash-attention's backward, by blocks of 64 keys x 64 queries: the probabilities are recomputed
// from the forward's log-sum-exp. Each block is computed transposed (S^T = K_j Q_i^T), so P^T and
// dS^T are row-major left operands of dV_j += P^T dO_i and dK_j += dS^T Q_i, and dQ^T accumulates
// K_j^T dS^T: no transposes inside the loop. Accumulation in fp32; P and dS rounded to bf16 for
// their matmuls, as the flash kernels do. Parallel over (batch, head); build with -fopenmp
// (at::parallel_for is inline: without OpenMP it runs on one thread).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

using at::BFloat16;
using fVec = at::vec::Vectorized<float>;
namespace cpublas = at::native::cpublas;

constexpr int64_t BLOCK = 64;  // keys and queries per block
constexpr int64_t HEAD = 64;   // head size
static_assert(BLOCK == HEAD, "square blocks as wide as a head: one brgemm shape for every product");

namespace {

void transpose(const BFloat16* in, BFloat16* out) {  // BLOCK x HEAD -> HEAD x BLOCK
  for (int64_t r = 0; r < BLOCK; ++r)
    for (int64_t c = 0; c < HEAD; ++c) out[c * BLOCK + r] = in[r * HEAD + c];
}

void pack(const BFloat16* in, BFloat16* out) {  // a 64 x 64 right operand into AMX's VNNI layout
  cpublas::pack(BLOCK, HEAD, HEAD, HEAD, at::kBFloat16, at::kBFloat16, in, out);
}

void matmul(const BFloat16* a, const BFloat16* packed_b, float* c, int64_t ld_c, bool add) {
  cpublas::brgemm(BLOCK, BLOCK, BLOCK, BLOCK, BLOCK, ld_c, add, a, packed_b, c, true);
}

// One head's rows of x (batch b, head h) into a zero-padded (padded_len, HEAD) buffer.
void gather(const at::Tensor& x, int64_t b, int64_t h, int64_t len, int64_t padded_len,
            BFloat16* out) {
  const BFloat16* rows = x.data_ptr<BFloat16>() + b * x.stride(0) + h * x.stride(1);
  for (int64_t t = 0; t < len; ++t)
    std::memcpy(out + t * HEAD, rows + t * x.stride(2), HEAD * sizeof(BFloat16));
  std::memset(out + len * HEAD, 0, (padded_len - len) * HEAD * sizeof(BFloat16));
}

inline void store_bf16(BFloat16* out, fVec x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(__m512(x))));
}

// P^T = exp(scale * S^T - lse) (zero above the diagonal on a diagonal block), dS^T = P^T (dP^T - D).
void probabilities_and_score_grads(const float* st, const float* dpt, const float* lse,
                                   const float* d, float scale, bool diagonal, BFloat16* pt,
                                   BFloat16* dst) {
  const fVec vscale(scale);
  for (int64_t key = 0; key < BLOCK; ++key) {
    for (int64_t query = 0; query < BLOCK; query += fVec::size()) {
      fVec p = (fVec::loadu(st + key * BLOCK + query) * vscale - fVec::loadu(lse + query)).exp_u20();
      if (diagonal && key > query) {  // query q sees this key only where q >= key
        int64_t hidden = std::min<int64_t>(key - query, fVec::size());
        __mmask16 seen = static_cast<__mmask16>((0xFFFFu << hidden) & 0xFFFFu);
        p = fVec(_mm512_maskz_mov_ps(seen, __m512(p)));
      }
      fVec ds = p * (fVec::loadu(dpt + key * BLOCK + query) - fVec::loadu(d + query));
      store_bf16(pt + key * BLOCK + query, p);
      store_bf16(dst + key * BLOCK + query, ds);
    }
  }
}

void write_rows(const float* src, int64_t ld_src, bool transposed, float scale, at::Tensor& dst,
                int64_t b, int64_t h, int64_t first, int64_t count) {
  BFloat16* base = dst.data_ptr<BFloat16>() + b * dst.stride(0) + h * dst.stride(1);
  for (int64_t r = 0; r < count; ++r) {
    BFloat16* row = base + (first + r) * dst.stride(2);
    for (int64_t c = 0; c < HEAD; ++c)
      row[c] = BFloat16(scale * (transposed ? src[c * ld_src + first + r] : src[r * ld_src + c]));
  }
}

// A thread's buffers, kept between calls: allocating them per call made glibc's malloc return
// and re-fault pages, which slowed the rest of the update more than the kernel saved.
struct Workspace {
  std::array<std::vector<BFloat16>, 10> rows;     // (padded, HEAD) each
  std::array<std::vector<BFloat16>, 4> blocks;    // BLOCK x BLOCK each
  std::array<std::vector<float>, 2> per_query;    // (padded) each
  std::array<std::vector<float>, 5> sums;         // dQ^T (HEAD, padded); the rest a block each
};

Workspace& workspace(int64_t padded) {
  thread_local Workspace w;
  for (auto& x : w.rows) x.resize(std::max<size_t>(x.size(), padded * HEAD));
  for (auto& x : w.blocks) x.resize(BLOCK * BLOCK);
  for (auto& x : w.per_query) x.resize(std::max<size_t>(x.size(), padded));
  w.sums[0].resize(std::max<size_t>(w.sums[0].size(), padded * HEAD));
  for (size_t i = 1; i < w.sums.size(); ++i) w.sums[i].resize(BLOCK * BLOCK);
  return w;
}

}  // namespace

std::vector<at::Tensor> causal_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, const at::Tensor& out,
                                                  const at::Tensor& grad_out,
                                                  const at::Tensor& logsumexp, double scale) {
  for (const at::Tensor* x : {&q, &k, &v, &out, &grad_out}) {
    TORCH_CHECK(x->scalar_type() == at::kBFloat16 && x->dim() == 4 && x->sizes() == q.sizes() &&
                    x->size(3) == HEAD && x->stride(3) == 1 && x->device().is_cpu(),
                "causal_attention_backward takes bf16 CPU tensors (batch, heads, len, 64) of one "
                "shape with contiguous rows");
  }
  TORCH_CHECK(cpublas::could_pack(at::kBFloat16), "causal_attention_backward needs AMX");
  const int64_t batch = q.size(0), heads = q.size(1), len = q.size(2);
  const int64_t blocks = (len + BLOCK - 1) / BLOCK, padded = blocks * BLOCK;
  auto dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  auto lse = logsumexp.to(at::kFloat).contiguous();
  TORCH_CHECK(lse.numel() == batch * heads * len, "logsumexp must be (batch, heads, len)");
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    Workspace& w = workspace(padded);
    auto& [Q, K, V, O, dO, KT, QT_p, dOT_p, dO_p, Q_p] = w.rows;
    auto& [scratch, PT, dST, dST_p] = w.blocks;
    auto& [D, LSE] = w.per_query;
    auto& [dQT, dK, dV, ST, dPT] = w.sums;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      gather(q, b, h, len, padded, Q.data());
      gather(k, b, h, len, padded, K.data());
      gather(v, b, h, len, padded, V.data());
      gather(out, b, h, len, padded, O.data());
      gather(grad_out, b, h, len, padded, dO.data());
      const float* lse_rows = lse.data_ptr<float>() + bh * len;
      for (int64_t t = 0; t < padded; ++t) {  // padded queries: lse = inf, so P = 0
        LSE[t] = t < len ? lse_rows[t] : INFINITY;
        float dot = 0.f;
        for (int64_t c = 0; c < HEAD; ++c) dot += float(dO[t * HEAD + c]) * float(O[t * HEAD + c]);
        D[t] = dot;
      }
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t at = blk * BLOCK * HEAD;
        transpose(Q.data() + at, scratch.data());
        pack(scratch.data(), QT_p.data() + at);
        transpose(dO.data() + at, scratch.data());
        pack(scratch.data(), dOT_p.data() + at);
        transpose(K.data() + at, KT.data() + at);
        pack(dO.data() + at, dO_p.data() + at);
        pack(Q.data() + at, Q_p.data() + at);
      }
      std::fill(dQT.begin(), dQT.begin() + padded * HEAD, 0.f);
      for (int64_t j = 0; j < blocks; ++j) {  // keys
        const int64_t kj = j * BLOCK * HEAD;
        for (int64_t i = j; i < blocks; ++i) {  // queries at or after them
          const int64_t qi = i * BLOCK * HEAD;
          matmul(K.data() + kj, QT_p.data() + qi, ST.data(), BLOCK, false);
          matmul(V.data() + kj, dOT_p.data() + qi, dPT.data(), BLOCK, false);
          probabilities_and_score_grads(ST.data(), dPT.data(), LSE.data() + i * BLOCK,
                                        D.data() + i * BLOCK, static_cast<float>(scale), i == j,
                                        PT.data(), dST.data());
          pack(dST.data(), dST_p.data());
          matmul(PT.data(), dO_p.data() + qi, dV.data(), HEAD, i != j);
          matmul(dST.data(), Q_p.data() + qi, dK.data(), HEAD, i != j);
          matmul(KT.data() + kj, dST_p.data(), dQT.data() + i * BLOCK, padded, true);
        }
        const int64_t rows = std::min(BLOCK, len - j * BLOCK);
        write_rows(dK.data(), HEAD, false, static_cast<float>(scale), dk, b, h, j * BLOCK, rows);
        write_rows(dV.data(), HEAD, false, 1.f, dv, b, h, j * BLOCK, rows);
      }
      write_rows(dQT.data(), padded, true, static_cast<float>(scale), dq, b, h, 0, len);
    }
    cpublas::brgemm_release(true);
  });
  return {dq, dk, dv};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("causal_attention_backward", &causal_attention_backward);
}
