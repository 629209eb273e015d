"""``python -m clusterman.tree.fetch_signal``, the path supervisord helpers of earlier versions name: it
runs the program, ``clusterman.batch.fetch_signal``, without importing it here (the tree is an adapter).
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("clusterman.batch.fetch_signal", run_name="__main__", alter_sys=True)
