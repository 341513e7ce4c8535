"""One module per CLI sub-command.

Each module defines ``add_parser(subparsers)`` (builds its argparse sub-parser, cheap: no mlx import) and
``main(args) -> int`` (does the work, importing heavy modules inside). ``app.cli`` lists the modules.
"""
