// test_reduce_cpu.cc — reduce_cpu against independent scalar references.
//
// Every dtype x op allowed by reduction_supported, nsrc 1..5, lengths around
// the 2048-element block, with and without dst == srcs[0]. float16/bfloat16
// are checked twice: bit-exact against a float32 left fold rounded once by a
// reference rounder written here (frexp/nearbyint on doubles, not the bit
// tricks of half_convert.h), and within 1 ulp of a float64 fold rounded once.
// `test_reduce_cpu bench` prints reduce speed instead.
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "atom/cpu/reduce_cpu.h"

// The reference must not fuse scale*x + acc either (see reduce_cpu.cc).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

using purlin::DType;
using purlin::RedOp;
using purlin::atom::cpu::reduce_cpu;

namespace {

int g_pass = 0, g_fail = 0;
std::mt19937_64 g_rng(12345);

void check(bool ok, const std::string& what) {
  if (ok) { ++g_pass; return; }
  ++g_fail;
  if (g_fail <= 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

// ---- reference half formats: sign | exponent | mantissa, decoded with doubles
struct Fmt { int mant, ebits, emin, emax; };
constexpr Fmt kF16{10, 5, -14, 15}, kBF16{7, 8, -126, 127};

double ref_widen(uint16_t b, Fmt f) {
  const int ebits = f.ebits, bias = f.emax;
  const int e = (b >> f.mant) & ((1 << ebits) - 1), m = b & ((1 << f.mant) - 1);
  const double s = (b >> 15) ? -1.0 : 1.0;
  if (e == (1 << ebits) - 1) return m ? NAN : s * INFINITY;
  if (e == 0) return s * std::ldexp(m, f.emin - f.mant);
  return s * std::ldexp(m + (1 << f.mant), e - bias - f.mant);
}

uint16_t ref_narrow(double x, Fmt f) {  // one round-to-nearest-even
  const int ebits = f.ebits, bias = f.emax;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0, inf = sign | (((1 << ebits) - 1) << f.mant);
  if (std::isnan(x)) return inf | (1 << (f.mant - 1));
  const double ax = std::fabs(x);
  if (std::isinf(ax)) return inf;
  int e = ax == 0 ? f.emin : std::max(std::ilogb(ax), f.emin);
  double r = std::nearbyint(std::ldexp(ax, f.mant - e));
  if (r >= std::ldexp(1.0, f.mant + 1)) r /= 2, ++e;
  if (e > f.emax) return inf;
  const int m = static_cast<int>(r);
  if (m < (1 << f.mant)) return sign | m;  // subnormal (or zero)
  return sign | ((e + bias) << f.mant) | (m - (1 << f.mant));
}

// ---- the reference fold, one element at a time ------------------------------
template <class A> A step(RedOp op, A a, A x) {
  switch (op) {
    case RedOp::Product: return a * x;
    case RedOp::Min: return (x < a || x != x) ? x : a;
    case RedOp::Max: return (x > a || x != x) ? x : a;
    default: return a + x;
  }
}
template <class A, class Load> A fold(RedOp op, int nsrc, const double* sc, Load load) {
  const bool pre = op == RedOp::PremulSum;
  A a = pre ? static_cast<A>(sc[0]) * load(0) : load(0);
  for (int k = 1; k < nsrc; ++k) a = step<A>(op, a, pre ? static_cast<A>(static_cast<A>(sc[k]) * load(k)) : load(k));
  return op == RedOp::Avg ? a / static_cast<A>(nsrc) : a;
}

bool same_float(double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 8) == 0; }

// Computes the expected element i and compares it with `got`.
template <class T> const T& at(const std::vector<std::vector<uint8_t>>& s, int k, int64_t i) {
  return reinterpret_cast<const T*>(s[k].data())[i];
}

bool check_elem(DType t, RedOp op, const std::vector<std::vector<uint8_t>>& s, const double* sc, int nsrc,
                int64_t i, const uint8_t* out) {
  auto ints = [&](auto tag) {
    using T = decltype(tag);
    uint64_t a = static_cast<uint64_t>(static_cast<int64_t>(at<T>(s, 0, i)));
    T mm = at<T>(s, 0, i);
    for (int k = 1; k < nsrc; ++k) {
      const T x = at<T>(s, k, i);
      const uint64_t ux = static_cast<uint64_t>(static_cast<int64_t>(x));
      a = op == RedOp::Product ? a * ux : a + ux;
      mm = op == RedOp::Min ? std::min(mm, x) : std::max(mm, x);
    }
    const T want = (op == RedOp::Min || op == RedOp::Max) ? mm : static_cast<T>(a);
    return std::memcmp(&want, out + i * sizeof(T), sizeof(T)) == 0;
  };
  switch (t) {
    case DType::Float32: {
      float w = fold<float>(op, nsrc, sc, [&](int k) { return at<float>(s, k, i); });
      return same_float(w, reinterpret_cast<const float*>(out)[i]);
    }
    case DType::Float64: {
      double w = fold<double>(op, nsrc, sc, [&](int k) { return at<double>(s, k, i); });
      return same_float(w, reinterpret_cast<const double*>(out)[i]);
    }
    case DType::Float16: case DType::BFloat16: {
      const Fmt f = t == DType::Float16 ? kF16 : kBF16;
      auto ld = [&](int k) { return ref_widen(at<uint16_t>(s, k, i), f); };
      const uint16_t got = reinterpret_cast<const uint16_t*>(out)[i];
      const uint16_t w32 = ref_narrow(fold<float>(op, nsrc, sc, [&](int k) { return float(ld(k)); }), f);
      const double v64 = fold<double>(op, nsrc, sc, ld);
      // float32 accumulation may differ from float64 by a few float32 ulps of
      // the terms (visible after cancellation), plus one rounding to the format.
      double mag = op == RedOp::Product ? 1 : 0;
      for (int k = 0; k < nsrc; ++k)
        mag = op == RedOp::Product ? mag * std::fabs(ld(k)) : mag + std::fabs(ld(k) * (op == RedOp::PremulSum ? sc[k] : 1));
      const double tol = std::ldexp(std::fabs(v64), -f.mant) + std::ldexp(mag, -21) + std::ldexp(1.0, f.emin - f.mant);
      const bool nan = std::isnan(ref_widen(got, f));
      const bool exact = nan ? std::isnan(ref_widen(w32, f)) : got == w32;
      const bool near = nan ? std::isnan(v64) : std::fabs(ref_widen(got, f) - v64) <= tol;
      return exact && near;
    }
    case DType::Int8: return ints(int8_t{});
    case DType::Int16: return ints(int16_t{});
    case DType::Int32: return ints(int32_t{});
    case DType::Int64: return ints(int64_t{});
    case DType::UInt8: return ints(uint8_t{});
    case DType::Bool: {
      bool any = false, all = true;
      for (int k = 0; k < nsrc; ++k) any |= at<uint8_t>(s, k, i) != 0, all &= at<uint8_t>(s, k, i) != 0;
      const bool lor = op == RedOp::Sum || op == RedOp::Max;
      return out[i] == uint8_t(lor ? any : all);
    }
    case DType::Complex64: case DType::Complex128: {
      auto cplx = [&](auto tag) {
        using R = decltype(tag);
        using C = std::complex<R>;
        if (op == RedOp::Product) {
          C a = at<C>(s, 0, i);
          for (int k = 1; k < nsrc; ++k) a *= at<C>(s, k, i);
          return std::abs(a - reinterpret_cast<const C*>(out)[i]) <= 1e-5 * (1 + std::abs(a));
        }
        for (int part = 0; part < 2; ++part) {
          R w = fold<R>(op, nsrc, sc, [&](int k) { return at<R>(s, k, 2 * i + part); });
          if (!same_float(w, reinterpret_cast<const R*>(out)[2 * i + part])) return false;
        }
        return true;
      };
      return t == DType::Complex64 ? cplx(float{}) : cplx(double{});
    }
    default: return false;
  }
}

// Random source data; floats on a coarse grid in [-4, 4] plus small noise bits.
void fill(DType t, std::vector<uint8_t>& v, int64_t n) {
  const size_t es = purlin::dtype_size(t);
  v.resize(n * es);
  std::uniform_real_distribution<double> u(-4, 4);
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* p = v.data() + i * es;
    const double x = u(g_rng);
    const uint64_t r = g_rng();
    switch (t) {
      case DType::Float32: case DType::Complex64: { float f[2] = {float(x), float(u(g_rng))}; std::memcpy(p, f, es); break; }
      case DType::Float64: case DType::Complex128: { double d[2] = {x, u(g_rng)}; std::memcpy(p, d, es); break; }
      case DType::Float16: { uint16_t h = ref_narrow(x, kF16); std::memcpy(p, &h, 2); break; }
      case DType::BFloat16: { uint16_t h = ref_narrow(x, kBF16); std::memcpy(p, &h, 2); break; }
      case DType::Bool: *p = r % 3 ? 1 : 0; break;
      default: std::memcpy(p, &r, es);
    }
  }
}

// alias: -1, or the source that dst is (exactly the same address).
void run_case(DType t, RedOp op, int nsrc, int64_t n, int alias) {
  std::vector<std::vector<uint8_t>> s(nsrc);
  for (auto& v : s) fill(t, v, n);
  std::vector<double> sc(nsrc);
  for (auto& x : sc) x = std::uniform_real_distribution<double>(-2, 2)(g_rng);
  std::vector<uint8_t> out(n * purlin::dtype_size(t) + 1, 0xAB);
  std::vector<const void*> ptrs(nsrc);
  for (int k = 0; k < nsrc; ++k) ptrs[k] = s[k].data();
  std::vector<uint8_t> aliased;  // the reference keeps the original source when dst is one
  if (alias >= 0) aliased = s[alias], ptrs[alias] = aliased.data();
  uint8_t* dst = alias >= 0 ? aliased.data() : out.data();
  reduce_cpu(dst, ptrs.data(), sc.data(), nsrc, n, t, op);
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i)
    if (!check_elem(t, op, s, sc.data(), nsrc, i, dst)) bad = i;
  char what[160];
  std::snprintf(what, sizeof what, "%s %s nsrc=%d n=%lld alias=%d: first bad element %lld", purlin::dtype_name(t),
                purlin::redop_name(op), nsrc, (long long)n, alias, (long long)bad);
  check(bad < 0 && (alias >= 0 || out[n * purlin::dtype_size(t)] == 0xAB), what);
}

void run_edges() {  // inf / nan / overflow through the half paths
  const uint16_t a[4] = {0x7c00, 0x7e00, 0x7bff, 0x0001}, b[4] = {0x3c00, 0x3c00, 0x7bff, 0x8001};
  const void* srcs[2] = {a, b};
  uint16_t d[4];
  reduce_cpu(d, srcs, nullptr, 2, 4, DType::Float16, RedOp::Sum);
  check(d[0] == 0x7c00 && (d[1] & 0x7fff) > 0x7c00 && d[2] == 0x7c00 && d[3] == 0, "f16 inf/nan/overflow edges");
  const float m[2] = {NAN, 1.0f}, n2[2] = {1.0f, NAN};
  const void* ms[2] = {m, n2};
  float o[2];
  reduce_cpu(o, ms, nullptr, 2, 2, DType::Float32, RedOp::Min);
  check(std::isnan(o[0]) && std::isnan(o[1]), "float MIN propagates NaN from either side");
  bool threw = false;
  try { reduce_cpu(o, ms, nullptr, 2, 2, DType::Float32, RedOp::PremulSum); } catch (const std::invalid_argument&) { threw = true; }
  check(threw, "PREMUL_SUM without scales throws");
}

void bench() {
  const int64_t bytes = 4 << 20;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (int nsrc : {2, 4}) {
      const int64_t n = bytes / purlin::dtype_size(t);
      std::vector<std::vector<uint8_t>> s(nsrc);
      std::vector<const void*> p(nsrc);
      for (int k = 0; k < nsrc; ++k) fill(t, s[k], n), p[k] = s[k].data();
      std::vector<uint8_t> d(bytes);
      double best = 1e9;
      for (int rep = 0; rep < 30; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        reduce_cpu(d.data(), p.data(), nullptr, nsrc, n, t, RedOp::Sum);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%-9s SUM nsrc=%d 4 MiB/src: %6.3f ms  %6.2f GB/s of sources read  %6.2f GB/s total traffic\n",
                  purlin::dtype_name(t), nsrc, best * 1e3, nsrc * bytes / best / 1e9, (nsrc + 1) * bytes / best / 1e9);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "bench") return bench(), 0;
  for (int ti = 0; ti < int(DType::kCount); ++ti)
    for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Product, RedOp::Min, RedOp::Max, RedOp::PremulSum}) {
      const DType t = DType(ti);
      if (!purlin::reduction_supported(t, op, nullptr)) {
        bool threw = false;
        try { reduce_cpu(nullptr, nullptr, nullptr, 1, 0, t, op); } catch (const std::invalid_argument&) { threw = true; }
        check(threw, std::string("unsupported combination throws: ") + purlin::dtype_name(t) + " " + purlin::redop_name(op));
        continue;
      }
      for (int nsrc = 1; nsrc <= 5; ++nsrc)
        for (int64_t n : {1, 3, 17, 2047, 2048, 2049, 4099})
          for (int alias : {-1, 0, nsrc / 2, nsrc - 1}) run_case(t, op, nsrc, n, alias);
    }
  run_edges();
  std::printf("test_reduce_cpu: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
