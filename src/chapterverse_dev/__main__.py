"""``python -m chapterverse_dev COMMAND``."""

from .commands import dev_app

dev_app(prog_name="python -m chapterverse_dev")
