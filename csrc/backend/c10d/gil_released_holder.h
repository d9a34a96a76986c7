// gil_released_holder.h — the pybind11 holder of PurlinBackend: a c10::intrusive_ptr whose
// destructor releases the GIL while it drops its reference. (Included by bindings.cc only.)
//
// NOTE [no GIL at the last reference] When a Python object holds the last reference to a
// PurlinBackend, the backend dies on the thread that holds the GIL. Its gloo fallback's destructor
// joins gloo's worker thread, and that thread may be freeing a finished op's tensors, which takes
// the GIL: both threads wait for ever (seen in test_backend_cpu.py's GroupEndTest, one run in two,
// on `del backend` after destroy_process_group). torch binds its own c10d backends with a holder
// of the same behaviour; a subclass bound from another module needs its own.
// Same layout as c10::intrusive_ptr<T>: pybind11 copies a base-class holder
// (c10::intrusive_ptr<c10d::Backend>, e.g. from ProcessGroup._get_backend) into it.
#pragma once

#include <utility>

#include <c10/util/intrusive_ptr.h>
#include <pybind11/pybind11.h>

namespace purlin::backend {

template <typename T>
class GilReleasedHolder {
 public:
  GilReleasedHolder() = default;
  // pybind11 makes a holder from a raw pointer it was handed: take a new reference.
  explicit GilReleasedHolder(T* p) : ptr_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(p)) {}
  GilReleasedHolder(c10::intrusive_ptr<T> p) : ptr_(std::move(p)) {}  // NOLINT: implicit, as a holder
  GilReleasedHolder(const GilReleasedHolder&) = default;
  GilReleasedHolder(GilReleasedHolder&&) noexcept = default;
  GilReleasedHolder& operator=(const GilReleasedHolder&) = default;
  GilReleasedHolder& operator=(GilReleasedHolder&&) noexcept = default;
  ~GilReleasedHolder() {
    if (!ptr_) return;
    if (PyGILState_Check()) {
      pybind11::gil_scoped_release no_gil;
      ptr_.reset();
    } else {
      ptr_.reset();
    }
  }

  T* get() const { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};

}  // namespace purlin::backend

PYBIND11_DECLARE_HOLDER_TYPE(T, purlin::backend::GilReleasedHolder<T>, true);
