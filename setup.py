"""Builds the C++ extension with CMake + ninja (+ ccache) through scripts/build.sh, so an
editable install and a plain `bash scripts/build.sh` produce the same torchtpu/_C*.so."""

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithCMake(build_py):
    def run(self):
        root = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, PYTHON=sys.executable)
        subprocess.check_call(["bash", os.path.join(root, "scripts", "build.sh")], env=env)
        super().run()


setup(cmdclass={"build_py": BuildWithCMake})
