"""tessel's dtype objects under torch's names (tessel.float32, tessel.long, ...)."""
from ._C import dtype

float32 = dtype.float32
float64 = dtype.float64
bfloat16 = dtype.bfloat16
float16 = dtype.float16
int64 = dtype.int64
int32 = dtype.int32
bool = dtype.bool  # noqa: A001 (torch.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001

__all__ = ["dtype", "float32", "float64", "bfloat16", "float16", "int64", "int32", "bool", "float", "double",
           "half", "long", "int"]
