//===- ShapeInference.cpp - static shape rules of ONNX ops ----------------===//
#include "dialects/Train/IR/ShapeInference.h"

#include "llvm/ADT/STLExtras.h"
#include <algorithm>
#include <cmath>

namespace mt::train {

std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

int64_t numElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                     Shape &out, std::string &err) {
  size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      err =
          "shapes " + shapeStr(a) + " and " + shapeStr(b) + " do not broadcast";
      return false;
    }
    out[i] = da == 1 ? db : da;
  }
  return true;
}

bool matmulShape(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                 Shape &out, std::string &err) {
  if (a.empty() || b.empty()) {
    err = "matmul operands must have rank >= 1";
    return false;
  }
  Shape sa(a.begin(), a.end()), sb(b.begin(), b.end());
  bool vecA = sa.size() == 1, vecB = sb.size() == 1;
  if (vecA)
    sa.insert(sa.begin(), 1);
  if (vecB)
    sb.push_back(1);
  int64_t k = sa.back(), k2 = sb[sb.size() - 2];
  if (k != k2) {
    err =
        "matmul contraction dims differ: " + shapeStr(a) + " x " + shapeStr(b);
    return false;
  }
  llvm::ArrayRef<int64_t> batchA(sa.data(), sa.size() - 2);
  llvm::ArrayRef<int64_t> batchB(sb.data(), sb.size() - 2);
  if (!broadcastShapes(batchA, batchB, out, err))
    return false;
  if (!vecA)
    out.push_back(sa[sa.size() - 2]);
  if (!vecB)
    out.push_back(sb.back());
  return true;
}

bool reshapeShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> shape,
                  bool allowZero, Shape &out, std::string &err) {
  out.clear();
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d == 0 && !allowZero) {
      if (i >= in.size()) {
        err = "reshape dim " + std::to_string(i) +
              " copies an input dim that does not exist";
        return false;
      }
      d = in[i];
    }
    if (d == -1) {
      if (inferred >= 0) {
        err = "reshape target " + shapeStr(shape) + " has more than one -1";
        return false;
      }
      inferred = i;
      out.push_back(1);
      continue;
    }
    if (d < 0) {
      err = "reshape target " + shapeStr(shape) + " has a negative dim";
      return false;
    }
    known *= d;
    out.push_back(d);
  }
  int64_t total = numElements(in);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0) {
      err = "cannot reshape " + shapeStr(in) + " to " + shapeStr(shape);
      return false;
    }
    out[inferred] = total / known;
  } else if (known != total) {
    err = "cannot reshape " + shapeStr(in) + " (" + std::to_string(total) +
          " elements) to " + shapeStr(shape);
    return false;
  }
  return true;
}

bool sliceShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> starts,
                llvm::ArrayRef<int64_t> ends, llvm::ArrayRef<int64_t> axes,
                llvm::ArrayRef<int64_t> steps, SliceParams &p,
                std::string &err) {
  int64_t rank = in.size();
  p.start.assign(rank, 0);
  p.step.assign(rank, 1);
  p.size.assign(in.begin(), in.end());
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    err = "slice starts, ends, axes and steps differ in length";
    return false;
  }
  llvm::SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    auto axis = normalizeAxis(axes[i], rank);
    if (!axis || seen[*axis]) {
      err = "slice axis " + std::to_string(axes[i]) +
            " is out of range or repeated for rank " + std::to_string(rank);
      return false;
    }
    seen[*axis] = true;
    int64_t dim = in[*axis], step = steps[i];
    if (step == 0) {
      err = "slice step is 0";
      return false;
    }
    // Clamp as ONNX does; ends may be INT64_MAX or INT64_MIN.
    int64_t s = starts[i], e = ends[i];
    if (s < 0)
      s = s < -dim ? -1 : s + dim;
    if (e < 0)
      e = e < -dim ? -1 : e + dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      p.size[*axis] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      p.size[*axis] = s > e ? (s - e - step - 1) / -step : 0;
    }
    p.start[*axis] = s;
    p.step[*axis] = step;
  }
  return true;
}

bool padShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> pads,
              Shape &out, std::string &err) {
  if (pads.size() != 2 * in.size()) {
    err = "pads has " + std::to_string(pads.size()) + " values, expected " +
          std::to_string(2 * in.size());
    return false;
  }
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t d = in[i] + pads[i] + pads[i + in.size()];
    if (d < 0) {
      err = "pads " + shapeStr(pads) + " crop more than dim " +
            std::to_string(i) + " has";
      return false;
    }
    out.push_back(d);
  }
  return true;
}

bool tileShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> repeats,
               Shape &out, std::string &err) {
  if (repeats.size() != in.size()) {
    err = "tile repeats " + shapeStr(repeats) + " do not match rank " +
          std::to_string(in.size());
    return false;
  }
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (repeats[i] < 0) {
      err = "tile repeats must be >= 0";
      return false;
    }
    out.push_back(in[i] * repeats[i]);
  }
  return true;
}

bool rangeLength(double start, double limit, double delta, int64_t &length,
                 std::string &err) {
  if (delta == 0) {
    err = "range delta is 0";
    return false;
  }
  length = std::max<int64_t>(0, (int64_t)std::ceil((limit - start) / delta));
  return true;
}

bool normalizeAxes(llvm::ArrayRef<int64_t> axes, int64_t rank, Shape &out,
                   std::string &err) {
  out.clear();
  for (int64_t a : axes) {
    auto n = normalizeAxis(a, rank);
    if (!n) {
      err = "axis " + std::to_string(a) + " is out of range for rank " +
            std::to_string(rank);
      return false;
    }
    out.push_back(*n);
  }
  llvm::sort(out);
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    err = "axes " + shapeStr(axes) + " repeat an axis";
    return false;
  }
  return true;
}

} // namespace mt::train
