"""The one exception the loader raises for bad input."""

from __future__ import annotations

#: longest tensor name and message (in characters) an error quotes
MAX_NAME = 200
MAX_MESSAGE = 1000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} chars)"


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded into the model.

    The message is one line that names the file (and the tensor when there is one). When this
    is raised by :func:`metalint.loader.load_checkpoint`, the caller's model is unchanged.
    A hostile checkpoint can name a tensor with megabytes of text, or have a value quoted
    in the message be as long: the tensor name and the message are cut to a short line.
    """

    def __init__(self, message: str, *, file: str | None = None, tensor: str | None = None):
        where = ""
        if file is not None:
            where = str(file)
            if tensor is not None:
                where += f": tensor {_cut(repr(tensor), MAX_NAME)}"
            where += ": "
        elif tensor is not None:
            where = f"tensor {_cut(repr(tensor), MAX_NAME)}: "
        super().__init__((where + _cut(str(message), MAX_MESSAGE)).replace("\n", " "))
        self.file = file
        self.tensor = tensor
