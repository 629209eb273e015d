"""The programs: every main but the ``clusterman`` command's (``cli/``) and ``make run``'s (``local/``), and
the setup they share (options and logging: ``arguments.py``; stopping on signals: ``stopping.py``). The
package keeps Clusterman's name: deployments start ``python -m clusterman.batch.autoscaler`` and its siblings.
"""
