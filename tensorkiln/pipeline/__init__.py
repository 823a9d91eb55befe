"""Image pipelines the Halide way: an algorithm of Funcs, a schedule apart, lowered through the loop IR.

    import tensorkiln.pipeline as pl
    x, y = pl.Var("x"), pl.Var("y")
    img = pl.Buffer(image)                       # (H, W) uint16, read as img[x, y]
    blur_x, blur_y = pl.Func("blur_x"), pl.Func("blur_y")
    blur_x[x, y] = (img[x - 1, y] + img[x, y] + img[x + 1, y]) / 3
    blur_y[x, y] = (blur_x[x, y - 1] + blur_x[x, y] + blur_x[x, y + 1]) / 3
    blur_y.tile(x, y, xi, yi, 256, 32).vectorize(xi, 16).parallel(y)
    blur_x.compute_at(blur_y, x).vectorize(x, 16)
    out = blur_y.realize([W - 2, H - 2])         # numpy array (H - 2, W - 2)

See docs/pipelines.md.
"""
from tensorkiln.pipeline.auto import auto_schedule, estimate_cost
from tensorkiln.pipeline.boundary import constant_exterior, mirror_image, repeat_edge
from tensorkiln.pipeline.compile import CompiledPipeline, explain, lower_pipeline
from tensorkiln.pipeline.expr import Expr, cast, clamp, math_function, select
from tensorkiln.pipeline.expr import maximum as max
from tensorkiln.pipeline.expr import minimum as min
from tensorkiln.pipeline.func import Func, apply_schedule, schedule_data
from tensorkiln.pipeline.names import Buffer, PipelineError, RDom, RVar, Var
from tensorkiln.pipeline.schedule import ScheduleStepError, Step
from tensorkiln.pipeline.types import Bool, Float, Int, UInt


def sqrt(x): return math_function("sqrt", x)
def exp(x): return math_function("exp", x)
def log(x): return math_function("log", x)
def sin(x): return math_function("sin", x)
def cos(x): return math_function("cos", x)
def floor(x): return math_function("floor", x)
def ceil(x): return math_function("ceil", x)
def round(x): return math_function("round", x)
def abs(x): return math_function("abs", x)


__all__ = [
    "Bool", "Buffer", "CompiledPipeline", "Expr", "Float", "Func", "Int", "PipelineError", "RDom", "RVar",
    "ScheduleStepError", "Step", "UInt", "Var", "abs", "apply_schedule", "auto_schedule", "estimate_cost", "cast", "ceil", "clamp",
    "constant_exterior", "cos", "exp", "explain", "floor", "log", "lower_pipeline", "max", "min", "mirror_image",
    "repeat_edge", "round", "schedule_data", "select", "sin", "sqrt",
]
