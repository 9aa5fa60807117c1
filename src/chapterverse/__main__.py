import sys

from .status_line import draw_early

draw_early(sys.argv[1:])  # before the command line's imports: the first sign of life

from .cli import main  # noqa: E402

main()
