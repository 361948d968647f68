//===- Dnnl.cpp -----------------------------------------------------------===//
#include "runtime/cpu/Dnnl.h"

extern "C" void omp_set_num_threads(int);

namespace dtc::runtime::cpu {

namespace {
bool allowed = true;
} // namespace

bool dnnlAllowed() { return allowed; }
void setDnnlAllowed(bool value) { allowed = value; }

dnnl::engine &dnnlEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream &dnnlStream() {
  static dnnl::stream stream(dnnlEngine());
  return stream;
}

void executeDnnl(const dnnl::primitive &primitive,
                 const std::unordered_map<int, dnnl::memory> &args, ThreadPool &pool) {
  // OpenMP's thread count is per calling thread; pools of different sizes
  // may share this one.
  omp_set_num_threads(pool.threads());
  primitive.execute(dnnlStream(), args);
  dnnlStream().wait();
}

dnnl::memory::desc plainF32(const dnnl::memory::dims &dims,
                            const dnnl::memory::dims &strides) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

dnnl::memory::desc weightsRequest(const dnnl::memory::desc &plain, const void *constant) {
  return constant ? dnnl::memory::desc(plain.dims(), plain.data_type(),
                                       dnnl::memory::format_tag::any)
                  : plain;
}

dnnl::memory weightsMemory(const dnnl::memory::desc &plain, const void *constant,
                           const dnnl::memory::desc &chosen) {
  if (!constant)
    return dnnl::memory(plain, dnnlEngine(), DNNL_MEMORY_NONE);
  dnnl::memory source(plain, dnnlEngine(), const_cast<void *>(constant));
  if (plain == chosen)
    return source;
  dnnl::memory packed(chosen, dnnlEngine());
  dnnl::reorder(source, packed).execute(dnnlStream(), source, packed);
  dnnlStream().wait();
  return packed;
}

} // namespace dtc::runtime::cpu
