"""python -m tessel.distributed.launch: torch.distributed.launch, the launcher before torchrun (deprecated there,
kept so that old command lines run). The same launcher as python -m tessel.distributed.run, with one legacy rule:
without --use-env each worker also gets the argument --local-rank=<its local rank> before the script's own
arguments (LOCAL_RANK is set either way), and --no-python therefore needs --use-env.
"""
import warnings

from .run import get_args_parser, run

__all__ = ["parse_args", "launch", "main"]


def parse_args(args):
    parser = get_args_parser()
    parser.add_argument("--use-env", "--use_env", dest="use_env", default=False, action="store_true",
                        help="pass the local rank in LOCAL_RANK only, not as --local-rank (the legacy default "
                        "passes both)")
    return parser.parse_args(args)


def launch(args):
    if args.no_python and not args.use_env:
        raise ValueError("When using the '--no-python' flag, you must also set the '--use-env' flag.")
    run(args)


def main(args=None):
    warnings.warn("The module torch.distributed.launch is deprecated\nand will be removed in future. Use torchrun.\n"
                  "Note that --use-env is set by default in torchrun.\nIf your script expects `--local-rank` argument "
                  "to be set, please\nchange it to read from `os.environ['LOCAL_RANK']` instead. See \n"
                  "https://pytorch.org/docs/stable/distributed.html#launch-utility for \nfurther instructions\n",
                  FutureWarning, stacklevel=2)
    launch(parse_args(args))


if __name__ == "__main__":
    from . import run as _run
    _run._COMMAND_LINE = True
    main()
