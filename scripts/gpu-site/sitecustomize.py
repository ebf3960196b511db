"""Imported by every Python process scripts/gpu-check.sh starts (this folder is on their PYTHONPATH): the carried
site ($GPU_CHECK_SITE, also on PYTHONPATH, ahead of the machine's own packages) is made a site directory, so the .pth
files in it are read, as pip's own install would have them read: cutlass-dsl reaches `cutlass` through one."""

import os
import site

_carried = os.environ.get("GPU_CHECK_SITE", "")
if _carried and os.path.isdir(_carried):
    site.addsitedir(_carried)
