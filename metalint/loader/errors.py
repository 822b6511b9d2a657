"""The one exception the loader raises for bad input."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded into the model.

    The message is one line that names the file (and the tensor when there is one). When this
    is raised by :func:`metalint.loader.load_checkpoint`, the caller's model is unchanged.
    """

    def __init__(self, message: str, *, file: str | None = None, tensor: str | None = None):
        where = ""
        if file is not None:
            where = str(file)
            if tensor is not None:
                where += f": tensor {tensor!r}"
            where += ": "
        elif tensor is not None:
            where = f"tensor {tensor!r}: "
        super().__init__((where + message).replace("\n", " "))
        self.file = file
        self.tensor = tensor
