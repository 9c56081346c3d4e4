from setuptools import find_packages, setup

# kbert/ and every package under it, plus configs/ installed as kbert.configs
# (package_dir in setup.cfg): a wheel holds the whole library, not only the top.
setup(packages=find_packages(include=["kbert", "kbert.*"]) + ["kbert.configs"])
