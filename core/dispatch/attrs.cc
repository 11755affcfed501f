// core/dispatch/attrs.cc — Attrs storage and printing.
#include "core/dispatch/attrs.h"

#include <sstream>

#include "core/base/error.h"
#include "core/tensor/shape.h"

namespace tessel {

Attrs& Attrs::Set(std::string_view name, AttrValue value) {
  for (auto& [k, v] : items_) {
    if (k == name) {
      v = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(std::string(name), std::move(value));
  return *this;
}

bool Attrs::Has(std::string_view name) const {
  for (const auto& [k, v] : items_) {
    if (k == name) return true;
  }
  return false;
}

const AttrValue& Attrs::Get(std::string_view name) const {
  for (const auto& [k, v] : items_) {
    if (k == name) return v;
  }
  TESSEL_INTERNAL_ASSERT(false, "missing attr '", name, "' in {", ToString(), "}");
  __builtin_unreachable();
}

template <typename T>
static const T& As(const AttrValue& v, std::string_view name) {
  const T* p = std::get_if<T>(&v);
  TESSEL_INTERNAL_ASSERT(p != nullptr, "attr '", name, "' has another type");
  return *p;
}

bool Attrs::GetBool(std::string_view name) const { return As<bool>(Get(name), name); }
int64_t Attrs::GetInt(std::string_view name) const { return As<int64_t>(Get(name), name); }
double Attrs::GetDouble(std::string_view name) const {
  const AttrValue& v = Get(name);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return As<double>(v, name);
}
const std::vector<int64_t>& Attrs::GetInts(std::string_view name) const {
  return As<std::vector<int64_t>>(Get(name), name);
}
const std::string& Attrs::GetString(std::string_view name) const { return As<std::string>(Get(name), name); }
DType Attrs::GetDType(std::string_view name) const { return As<DType>(Get(name), name); }

std::string Attrs::ToString() const {
  std::ostringstream os;
  bool first = true;
  for (const auto& [k, v] : items_) {
    os << (first ? "" : ", ") << k << "=";
    first = false;
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, std::vector<int64_t>>) {
            os << ShapeStr(x);
          } else if constexpr (std::is_same_v<X, bool>) {
            os << (x ? "true" : "false");
          } else {
            os << x;
          }
        },
        v);
  }
  return os.str();
}

}  // namespace tessel
