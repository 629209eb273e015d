from setuptools import find_packages
from setuptools import setup

setup(
    name="clusterman",
    version="0.1.0",
    description="An autoscaler for pools of cloud machines, driven by user-written signals",
    python_requires=">=3.11",
    packages=find_packages(include=["clusterman", "clusterman.*", "clusterman_signals", "clusterman_signals.*"]),
    package_data={"clusterman": ["py.typed"], "clusterman_signals": ["py.typed"]},
    entry_points={"console_scripts": ["clusterman=clusterman.cli.main:main"]},
)
