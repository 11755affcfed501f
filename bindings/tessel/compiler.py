"""torch.compiler's queries and decorators for eager code (tessel.compile is eager: nothing compiles), so
helpers such as HF's is_torchdynamo_compiling() and `@torch.compiler.disable` run as under eager torch."""


def is_compiling():
    return False


def is_dynamo_compiling():
    return False


def is_exporting():
    return False


def _is_non_strict_tracing():
    """torchtitan's expert-parallel token dispatcher asks it on every exchange: nothing traces in eager tessel."""
    return False


def disable(fn=None, recursive=True, **kwargs):
    if fn is None:
        return lambda f: f
    return fn


def allow_in_graph(fn):
    return fn


def assume_constant_result(fn):
    return fn


def reset():
    """Nothing is cached: a no-op."""
