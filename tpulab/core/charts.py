"""Moved to `tpulab.base.charts`; this name still loads for plugins written against it."""

from tpulab.base.charts import *  # noqa: F403
from tpulab.core import moved

moved(__name__, "tpulab.base.charts")
