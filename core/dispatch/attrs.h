// core/dispatch/attrs.h — the non-tensor arguments of an op call (dims, scalars, flags, dtypes).
//
// Invariant: attrs are small named values; a kernel, a backward formula and a sharding rule all read
// the same Attrs of a call, so every non-tensor argument an op needs lives here (never in closures).
// Getters throw kInternal when a required attr is missing or has another type (an op-definition bug).
//
// Example:
//   Attrs a = Attrs().Set("dims", std::vector<int64_t>{1}).Set("keepdim", true);
//   int64_t d = a.GetInts("dims")[0];
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/tensor/dtype.h"

namespace tessel {

using AttrValue = std::variant<bool, int64_t, double, std::vector<int64_t>, std::string, DType>;

class Attrs {
 public:
  Attrs() = default;
  Attrs& Set(std::string_view name, AttrValue value);
  // Any integer type is stored as int64_t. NOTE: a template (not `Set(name, int)`) so that a double
  // argument binds to AttrValue's double alternative instead of converting to int (0.5 → 0).
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Attrs& Set(std::string_view name, I value) {
    return Set(name, AttrValue(static_cast<int64_t>(value)));
  }
  Attrs& Set(std::string_view name, const char* value) { return Set(name, AttrValue(std::string(value))); }
  bool Has(std::string_view name) const;
  bool GetBool(std::string_view name) const;
  int64_t GetInt(std::string_view name) const;
  double GetDouble(std::string_view name) const;  // also accepts an int attr
  const std::vector<int64_t>& GetInts(std::string_view name) const;
  const std::string& GetString(std::string_view name) const;
  DType GetDType(std::string_view name) const;
  // Getters with a default for optional attrs.
  bool GetBool(std::string_view name, bool dflt) const { return Has(name) ? GetBool(name) : dflt; }
  int64_t GetInt(std::string_view name, int64_t dflt) const { return Has(name) ? GetInt(name) : dflt; }
  double GetDouble(std::string_view name, double dflt) const { return Has(name) ? GetDouble(name) : dflt; }
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  std::string ToString() const;  // "dims=[1], keepdim=true"

 private:
  const AttrValue& Get(std::string_view name) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace tessel
