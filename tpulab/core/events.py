"""Moved to `tpulab.base.events`; this name still loads for plugins written against it."""

from tpulab.base.events import *  # noqa: F403
from tpulab.core import moved

moved(__name__, "tpulab.base.events")
