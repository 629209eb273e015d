"""``python -m clusterman.tree.run_signal``, the path supervisord helpers of earlier versions name: it
runs the program, ``clusterman.batch.run_signal``, without importing it here (the tree is an adapter).
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("clusterman.batch.run_signal", run_name="__main__", alter_sys=True)
