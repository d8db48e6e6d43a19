"""setup.cfg holds the package's metadata; this adds the one file a package
takes from outside its folder: configs/default.yaml, the main job that
``tfdml-train`` trains without ``--config``, copied into the built package as
``tfdml_app/configs/default.yaml`` (``tfdml_app.train_cli.default_config``), so
that an install without the repository finds it. The repository's file is the
only copy in the source tree; MANIFEST.in puts it into the source distribution."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

#: Its path in the repository, and in the tfdml_app package of a build.
MAIN_JOB = os.path.join("configs", "default.yaml")


class BuildPy(build_py):
    """build_py, and the main job's config into the built tfdml_app package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads configs/ in place
            return
        target = os.path.join(self.build_lib, "tfdml_app", MAIN_JOB)
        self.mkpath(os.path.dirname(target))
        self.copy_file(MAIN_JOB, target)


setup(cmdclass={"build_py": BuildPy})
