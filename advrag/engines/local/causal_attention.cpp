// Causal attention (bf16, head size 64) by 64 x 64 blocks, whose products run on AMX tiles (ATen's
// cpublas::brgemm) where the caller asks for them (`tiles`), else on AVX512-BF16 dot products.
//
// Forward: flash-attention's, each block of 64 queries against its keys in chunks of up to 256
// (S = Q K^T for the chunk, an online softmax that rescales the running output, O += P V as one
// product over the chunk's keys), output and log-sum-exp from fp32 sums.
// Backward: flash-attention's, by blocks of 64 keys x 64 queries: the probabilities are
// recomputed from the forward's log-sum-exp. Each block is computed transposed (S^T = K_j Q_i^T),
// so P^T and dS^T are row-major left operands of dV_j += P^T dO_i and dK_j += dS^T Q_i, and dQ^T
// accumulates K_j^T dS^T: no transposes inside the loop.
// Both: P and dS rounded to bf16 for their matmuls, as the flash kernels do. Sequences: the length
// axis holds them one after another (packed rows), bounded by `bounds` = [0, end_1, ...,
// len]; each attends causally within itself only, exactly as if it were its own batch row.
// Parallel over (batch, head, sequence); build with -fopenmp (at::parallel_for is inline: without
// OpenMP it runs on one thread).
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
constexpr int64_t CHUNK = 256; // keys per step of the forward's online softmax
static_assert(BLOCK == HEAD, "square blocks as wide as a head: one shape for every product");

namespace {

void transpose(const BFloat16* in, BFloat16* out) {  // BLOCK x HEAD -> HEAD x BLOCK
  for (int64_t r = 0; r < BLOCK; ++r)
    for (int64_t c = 0; c < HEAD; ++c) out[c * BLOCK + r] = in[r * HEAD + c];
}

constexpr int64_t ROWS = 4;  // rows of C per pass of the dot-product kernel: 4 x 4 accumulators

// C (BLOCK x 64, leading dimension ld_c) = or += A (BLOCK x depth, ld_a) B (depth x 64, in VNNI
// pairs): AVX512-BF16 dot products, each adding a pair of A's products to 16 fp32 sums of C.
void dot_product_block(int64_t depth, const BFloat16* a, int64_t ld_a, const BFloat16* packed_b,
                       float* c, int64_t ld_c, bool add) {
  constexpr int64_t LANES = 16;
  for (int64_t row = 0; row < BLOCK; row += ROWS) {
    __m512 acc[ROWS][HEAD / LANES];
    for (int64_t r = 0; r < ROWS; ++r)
      for (int64_t v = 0; v < HEAD / LANES; ++v)
        acc[r][v] = add ? _mm512_loadu_ps(c + (row + r) * ld_c + v * LANES) : _mm512_setzero_ps();
    for (int64_t k = 0; k < depth; k += 2) {
      __m512bh b[HEAD / LANES];
      for (int64_t v = 0; v < HEAD / LANES; ++v)
        b[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(packed_b + k * HEAD + v * 2 * LANES));
      for (int64_t r = 0; r < ROWS; ++r) {
        int32_t pair;
        std::memcpy(&pair, a + (row + r) * ld_a + k, sizeof(pair));
        const __m512bh a_pair = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
        for (int64_t v = 0; v < HEAD / LANES; ++v)
          acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a_pair, b[v]);
      }
    }
    for (int64_t r = 0; r < ROWS; ++r)
      for (int64_t v = 0; v < HEAD / LANES; ++v)
        _mm512_storeu_ps(c + (row + r) * ld_c + v * LANES, acc[r][v]);
  }
}

// The block products of both kernels, on AMX tiles (ATen's cpublas::brgemm, with its own packing
// of right operands) or on AVX512-BF16 dot products (right operands in VNNI pairs).
struct BlockMath {
  bool tiles;

  // A 64 x 64 right operand packed. VNNI pairs: row pair p holds (in[2p][n], in[2p + 1][n]) for
  // each n, so the operands of consecutive blocks make one operand as deep as all of them.
  void pack(const BFloat16* in, BFloat16* out) const {
    if (tiles) return cpublas::pack(BLOCK, HEAD, HEAD, HEAD, at::kBFloat16, at::kBFloat16, in, out);
    for (int64_t p = 0; p < BLOCK / 2; ++p)
      for (int64_t n = 0; n < HEAD; ++n) {
        out[(p * HEAD + n) * 2] = in[2 * p * HEAD + n];
        out[(p * HEAD + n) * 2 + 1] = in[(2 * p + 1) * HEAD + n];
      }
  }

  // A block's transpose as a packed right operand (Q^T, dO^T, K^T), through a BLOCK x HEAD scratch.
  void pack_transposed(const BFloat16* in, BFloat16* scratch, BFloat16* out) const {
    transpose(in, scratch);
    pack(scratch, out);
  }

  // C (BLOCK x 64) = or += A (BLOCK x depth) B (depth x 64, packed), depth a multiple of 64: every
  // product of both kernels has this shape.
  void product(int64_t depth, const BFloat16* a, int64_t ld_a, const BFloat16* packed_b, float* c,
               int64_t ld_c, bool add) const {
    if (tiles) return cpublas::brgemm(BLOCK, HEAD, depth, ld_a, HEAD, ld_c, add, a, packed_b, c, true);
    dot_product_block(depth, a, ld_a, packed_b, c, ld_c, add);
  }

  // One square block product (A's rows BLOCK apart).
  void matmul(const BFloat16* a, const BFloat16* packed_b, float* c, int64_t ld_c, bool add) const {
    product(BLOCK, a, BLOCK, packed_b, c, ld_c, add);
  }

  // Hands the AMX tiles back after a thread's products.
  void release() const {
    if (tiles) cpublas::brgemm_release(true);
  }
};

// One sequence: batch row b, head h, positions [start, start + len) of the length axis.
struct Sequence {
  int64_t b, h, start, len;
};

// A sequence's rows of x into a zero-padded (padded_len, HEAD) buffer.
void gather(const at::Tensor& x, const Sequence& seq, int64_t padded_len, BFloat16* out) {
  const int64_t len = seq.len;
  const BFloat16* rows = x.data_ptr<BFloat16>() + seq.b * x.stride(0) + seq.h * x.stride(1) +
                         seq.start * x.stride(2);
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
                const Sequence& seq, int64_t first, int64_t count) {
  BFloat16* base = dst.data_ptr<BFloat16>() + seq.b * dst.stride(0) + seq.h * dst.stride(1) +
                   seq.start * dst.stride(2);
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

// Lanes of keys [key, key + 16) that query `query` sees, where the diagonal block starts at key
// `diagonal_from` (all lanes before it; none past the query on it).
inline __mmask16 seen_lanes(int64_t query, int64_t key, int64_t diagonal_from) {
  const int64_t seen = query - (key - diagonal_from) + 1;
  if (key < diagonal_from || seen >= 16) return static_cast<__mmask16>(0xFFFFu);
  return static_cast<__mmask16>(seen <= 0 ? 0u : (1u << seen) - 1u);
}

// One query block's scores for `keys` keys -> probabilities, online (flash-attention's forward):
// each row's running max and sum are updated, its accumulated output rescaled by
// exp(max_old - max_new), and P = exp(scale * (S - max_new)) written in bf16 for P V. Where the
// keys end with the diagonal block, its keys after each query are hidden (P = 0).
void online_softmax(const float* s, int64_t keys, bool diagonal, float scale, float* max,
                    float* sum, float* acc, BFloat16* p) {
  const int64_t diagonal_from = diagonal ? keys - BLOCK : keys;
  const __m512 hidden = _mm512_set1_ps(-INFINITY);
  for (int64_t query = 0; query < BLOCK; ++query) {  // the max is of raw scores (scale > 0)
    const float* row = s + query * CHUNK;
    __m512 top = hidden;
    for (int64_t key = 0; key < keys; key += fVec::size())
      top = _mm512_mask_max_ps(top, seen_lanes(query, key, diagonal_from), top,
                               _mm512_loadu_ps(row + key));
    const float new_max = std::max(max[query], _mm512_reduce_max_ps(top));
    const float rescale = std::exp(scale * (max[query] - new_max));  // 0 on the first keys
    const fVec vscale(scale), shift(-scale * new_max);
    fVec total(0.f);
    for (int64_t key = 0; key < keys; key += fVec::size()) {
      fVec e = at::vec::fmadd(fVec::loadu(row + key), vscale, shift).exp_u20();
      e = fVec(_mm512_maskz_mov_ps(seen_lanes(query, key, diagonal_from), __m512(e)));
      total = total + e;
      store_bf16(p + query * CHUNK + key, e);
    }
    sum[query] = sum[query] * rescale + _mm512_reduce_add_ps(__m512(total));
    max[query] = new_max;
    for (int64_t c = 0; c < HEAD; c += fVec::size())
      (fVec::loadu(acc + query * HEAD + c) * fVec(rescale)).store(acc + query * HEAD + c);
  }
}

struct ForwardWorkspace {
  std::array<std::vector<BFloat16>, 4> rows;  // Q, K (then V), K^T packed, V packed: (padded, HEAD)
  std::vector<BFloat16> scratch, p;           // BLOCK x BLOCK, BLOCK x CHUNK
  std::vector<float> s, acc, max, sum;        // BLOCK x CHUNK, BLOCK x HEAD, BLOCK, BLOCK
};

ForwardWorkspace& forward_workspace(int64_t padded) {
  thread_local ForwardWorkspace w;
  for (auto& x : w.rows) x.resize(std::max<size_t>(x.size(), padded * HEAD));
  w.scratch.resize(BLOCK * BLOCK);
  w.p.resize(BLOCK * CHUNK);
  w.s.resize(BLOCK * CHUNK);
  w.acc.resize(BLOCK * HEAD);
  w.max.resize(BLOCK);
  w.sum.resize(BLOCK);
  return w;
}

// The kernels' block math, checked against this CPU: AMX tiles where `tiles`, else AVX512-BF16.
BlockMath block_math(bool tiles, const char* name) {
  TORCH_CHECK(__builtin_cpu_supports("avx512bf16"), name, " needs a CPU with AVX512-BF16");
  TORCH_CHECK(!tiles || cpublas::could_pack(at::kBFloat16), name, ": this CPU has no AMX tiles");
  return BlockMath{tiles};
}

void check_inputs(std::initializer_list<const at::Tensor*> xs, const at::Tensor& q,
                  const char* name) {
  for (const at::Tensor* x : xs) {
    TORCH_CHECK(x->scalar_type() == at::kBFloat16 && x->dim() == 4 && x->sizes() == q.sizes() &&
                    x->size(3) == HEAD && x->stride(3) == 1 && x->device().is_cpu(),
                name, " takes bf16 CPU tensors (batch, heads, len, 64) of one shape with "
                "contiguous rows");
  }
}

// The sequences' bounds on the length axis: int64 [0, ..., len], increasing.
std::vector<int64_t> sequence_bounds(const at::Tensor& bounds, int64_t len, const char* name) {
  TORCH_CHECK(bounds.scalar_type() == at::kLong && bounds.dim() == 1 && bounds.numel() >= 2,
              name, " takes the sequences' bounds as an int64 tensor [0, ..., len]");
  const at::Tensor owned = bounds.contiguous();
  std::vector<int64_t> out(owned.data_ptr<int64_t>(), owned.data_ptr<int64_t>() + owned.numel());
  TORCH_CHECK(out.front() == 0 && out.back() == len, name, ": the bounds must run from 0 to the "
              "length axis's size ", len, ", got ", out.front(), " to ", out.back());
  for (size_t i = 1; i < out.size(); ++i)
    TORCH_CHECK(out[i] > out[i - 1], name, ": the bounds must increase (no empty sequence)");
  return out;
}

// Work item `item` of batch x heads x sequences (sequences fastest, so that each thread's share of
// the items mixes long and short sequences).
Sequence sequence_of(int64_t item, int64_t heads, const std::vector<int64_t>& bounds) {
  const int64_t sequences = static_cast<int64_t>(bounds.size()) - 1;
  const int64_t s = item % sequences, bh = item / sequences;
  return {bh / heads, bh % heads, bounds[s], bounds[s + 1] - bounds[s]};
}

// The longest sequence's length rounded up to whole blocks (the rows of every buffer).
int64_t padded_length(const std::vector<int64_t>& bounds) {
  int64_t longest = 0;
  for (size_t i = 1; i < bounds.size(); ++i) longest = std::max(longest, bounds[i] - bounds[i - 1]);
  return (longest + BLOCK - 1) / BLOCK * BLOCK;
}

}  // namespace

// Causal attention within each sequence of `bounds`: the output, (batch, heads, len, 64) laid out
// as (batch, len, heads, 64), and the log-sum-exp of each query's scaled scores, (batch, heads,
// len) fp32.
std::vector<at::Tensor> causal_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, const at::Tensor& bounds,
                                                 double scale, bool tiles) {
  const BlockMath math = block_math(tiles, "causal_attention_forward");
  check_inputs({&q, &k, &v}, q, "causal_attention_forward");
  const int64_t batch = q.size(0), heads = q.size(1), full_len = q.size(2);
  const std::vector<int64_t> cuts = sequence_bounds(bounds, full_len, "causal_attention_forward");
  const int64_t longest = padded_length(cuts), sequences = cuts.size() - 1;
  auto out = at::empty({batch, full_len, heads, HEAD}, q.options()).transpose(1, 2);
  auto lse = at::empty({batch, heads, full_len}, q.options().dtype(at::kFloat));
  at::parallel_for(0, batch * heads * sequences, 1, [&](int64_t begin, int64_t end) {
    ForwardWorkspace& w = forward_workspace(longest);
    auto& [Q, K, KT_p, V_p] = w.rows;
    for (int64_t item = begin; item < end; ++item) {
      const Sequence seq = sequence_of(item, heads, cuts);
      const int64_t len = seq.len, blocks = (len + BLOCK - 1) / BLOCK, padded = blocks * BLOCK;
      gather(q, seq, padded, Q.data());
      gather(k, seq, padded, K.data());
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t at = blk * BLOCK * HEAD;
        math.pack_transposed(K.data() + at, w.scratch.data(), KT_p.data() + at);
      }
      gather(v, seq, padded, K.data());  // K's rows are packed: its buffer takes V's
      for (int64_t blk = 0; blk < blocks; ++blk)
        math.pack(K.data() + blk * BLOCK * HEAD, V_p.data() + blk * BLOCK * HEAD);
      float* lse_rows = lse.data_ptr<float>() + (seq.b * heads + seq.h) * full_len + seq.start;
      for (int64_t i = 0; i < blocks; ++i) {  // queries
        std::fill(w.max.begin(), w.max.end(), -INFINITY);
        std::fill(w.sum.begin(), w.sum.end(), 0.f);
        std::fill(w.acc.begin(), w.acc.end(), 0.f);
        const int64_t seen = (i + 1) * BLOCK;  // keys at or before the block's queries
        for (int64_t first = 0; first < seen; first += CHUNK) {
          const int64_t keys = std::min(CHUNK, seen - first);
          for (int64_t j = 0; j < keys; j += BLOCK)
            math.product(HEAD, Q.data() + i * BLOCK * HEAD, HEAD,
                         KT_p.data() + (first + j) * HEAD, w.s.data() + j, CHUNK, false);
          online_softmax(w.s.data(), keys, first + keys == seen, static_cast<float>(scale),
                         w.max.data(), w.sum.data(), w.acc.data(), w.p.data());
          math.product(keys, w.p.data(), CHUNK, V_p.data() + first * HEAD, w.acc.data(), HEAD, true);
        }
        const int64_t rows = std::min(BLOCK, len - i * BLOCK);
        for (int64_t r = 0; r < rows; ++r) {
          lse_rows[i * BLOCK + r] = static_cast<float>(scale) * w.max[r] + std::log(w.sum[r]);
          const fVec inverse(1.f / w.sum[r]);
          BFloat16* row = out.data_ptr<BFloat16>() + seq.b * out.stride(0) +
                          seq.h * out.stride(1) + (seq.start + i * BLOCK + r) * out.stride(2);
          for (int64_t c = 0; c < HEAD; c += fVec::size())
            store_bf16(row + c, fVec::loadu(w.acc.data() + r * HEAD + c) * inverse);
        }
      }
    }
    math.release();
  });
  return {out, lse};
}

std::vector<at::Tensor> causal_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, const at::Tensor& out,
                                                  const at::Tensor& grad_out,
                                                  const at::Tensor& logsumexp,
                                                  const at::Tensor& bounds, double scale,
                                                  bool tiles) {
  const BlockMath math = block_math(tiles, "causal_attention_backward");
  check_inputs({&q, &k, &v, &out, &grad_out}, q, "causal_attention_backward");
  const int64_t batch = q.size(0), heads = q.size(1), full_len = q.size(2);
  const std::vector<int64_t> cuts = sequence_bounds(bounds, full_len, "causal_attention_backward");
  const int64_t longest = padded_length(cuts), sequences = cuts.size() - 1;
  auto dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  auto lse = logsumexp.to(at::kFloat).contiguous();
  TORCH_CHECK(lse.numel() == batch * heads * full_len, "logsumexp must be (batch, heads, len)");
  at::parallel_for(0, batch * heads * sequences, 1, [&](int64_t begin, int64_t end) {
    Workspace& w = workspace(longest);
    auto& [Q, K, V, O, dO, KT, QT_p, dOT_p, dO_p, Q_p] = w.rows;
    auto& [scratch, PT, dST, dST_p] = w.blocks;
    auto& [D, LSE] = w.per_query;
    auto& [dQT, dK, dV, ST, dPT] = w.sums;
    for (int64_t item = begin; item < end; ++item) {
      const Sequence seq = sequence_of(item, heads, cuts);
      const int64_t len = seq.len, blocks = (len + BLOCK - 1) / BLOCK, padded = blocks * BLOCK;
      gather(q, seq, padded, Q.data());
      gather(k, seq, padded, K.data());
      gather(v, seq, padded, V.data());
      gather(out, seq, padded, O.data());
      gather(grad_out, seq, padded, dO.data());
      const float* lse_rows = lse.data_ptr<float>() + (seq.b * heads + seq.h) * full_len + seq.start;
      for (int64_t t = 0; t < padded; ++t) {  // padded queries: lse = inf, so P = 0
        LSE[t] = t < len ? lse_rows[t] : INFINITY;
        float dot = 0.f;
        for (int64_t c = 0; c < HEAD; ++c) dot += float(dO[t * HEAD + c]) * float(O[t * HEAD + c]);
        D[t] = dot;
      }
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t at = blk * BLOCK * HEAD;
        math.pack_transposed(Q.data() + at, scratch.data(), QT_p.data() + at);
        math.pack_transposed(dO.data() + at, scratch.data(), dOT_p.data() + at);
        transpose(K.data() + at, KT.data() + at);
        math.pack(dO.data() + at, dO_p.data() + at);
        math.pack(Q.data() + at, Q_p.data() + at);
      }
      std::fill(dQT.begin(), dQT.begin() + padded * HEAD, 0.f);
      for (int64_t j = 0; j < blocks; ++j) {  // keys
        const int64_t kj = j * BLOCK * HEAD;
        for (int64_t i = j; i < blocks; ++i) {  // queries at or after them
          const int64_t qi = i * BLOCK * HEAD;
          math.matmul(K.data() + kj, QT_p.data() + qi, ST.data(), BLOCK, false);
          math.matmul(V.data() + kj, dOT_p.data() + qi, dPT.data(), BLOCK, false);
          probabilities_and_score_grads(ST.data(), dPT.data(), LSE.data() + i * BLOCK,
                                        D.data() + i * BLOCK, static_cast<float>(scale), i == j,
                                        PT.data(), dST.data());
          math.pack(dST.data(), dST_p.data());
          math.matmul(PT.data(), dO_p.data() + qi, dV.data(), HEAD, i != j);
          math.matmul(dST.data(), Q_p.data() + qi, dK.data(), HEAD, i != j);
          math.matmul(KT.data() + kj, dST_p.data(), dQT.data() + i * BLOCK, padded, true);
        }
        const int64_t rows = std::min(BLOCK, len - j * BLOCK);
        write_rows(dK.data(), HEAD, false, static_cast<float>(scale), dk, seq, j * BLOCK, rows);
        write_rows(dV.data(), HEAD, false, 1.f, dv, seq, j * BLOCK, rows);
      }
      write_rows(dQT.data(), padded, true, static_cast<float>(scale), dq, seq, 0, len);
    }
    math.release();
  });
  return {dq, dk, dv};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("causal_attention_forward", &causal_attention_forward);
  m.def("causal_attention_backward", &causal_attention_backward);
}
