"""NIXL's logging helper (nixl.logging.get_logger), for code written for NIXL.

get_logger(name) gives the logger "nixl.<name without leading underscores>".
The first call gives the "nixl" logger a handler to stdout in NIXL's format
("<time> NIXL <LEVEL> <file>:<line> <message>") at INFO, or at the level
NIXL_LOG_LEVEL names (TRACE, DEBUG, INFO, WARN, ERROR, FATAL).  Unlike NIXL's,
the "nixl" logger still propagates, so an application's own handlers (and
pytest's caplog) see its records; importing nixl configures nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

_configured = False
_lock = threading.Lock()
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
FORMAT = "%(asctime)s NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s"
DATEFMT = "%Y-%m-%d %H:%M:%S"


def setup_logging() -> None:
    """Configure the "nixl" logger once (get_logger calls it)."""
    global _configured
    with _lock:
        if _configured:
            return
        _configured = True
        root = logging.getLogger("nixl")
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(FORMAT, DATEFMT))
        handler.setLevel(logging.DEBUG)
        handler._nixl_default = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        env = os.environ.get("NIXL_LOG_LEVEL")
        if env:
            level = _LEVELS.get(env.strip().upper())
            if level is None:
                root.warning("Invalid NIXL_LOG_LEVEL value '%s'. Using configuration default.", env)
            else:
                root.setLevel(level)


def get_logger(name: str) -> logging.Logger:
    setup_logging()
    return logging.getLogger(f"nixl.{name.lstrip('_')}")


__all__ = ["get_logger", "setup_logging"]
