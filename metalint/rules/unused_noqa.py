from __future__ import annotations

from metalint.static.rule import Rule


class UnusedNoqa(Rule):
    """
    ## What it does
    Reports a `# noqa: MLxxx` comment that suppresses nothing: the code it names is enabled but
    no finding of that code is on that line. Bare `# noqa` and other tools' codes are left alone.

    ## Why is this bad on meta?
    A stale suppression hides the next real finding on that line: a value-carrying parameter
    added there later is lost after `to_empty()` without a word.

    ## Example
    ```python
    self.weight = nn.Parameter(torch.empty(d))  # noqa: ML001
    ```

    Use instead:
    ```python
    self.weight = nn.Parameter(torch.empty(d))
    ```

    ## Fix safety
    No automatic fix: delete the comment by hand.

    ## Options
    Enable it with `extend-select = ["ML100"]`.

    ## When to switch it off
    It is off by default.

    ## Known limits
    - A code that is disabled is not judged: its `# noqa` may be stale unseen.
    """

    code = "ML100"
    name = "unused-noqa"
    summary = "A `# noqa` comment names a metalint code that reports nothing on that line"
    default = False

    VALID = [
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))  # noqa: ML001
        self.beta = nn.Parameter(torch.empty(dim))  # noqa: E501 (another tool's code)
""",
    ]
    INVALID = [
        """
import torch
from torch import nn

class LayerScale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.empty(dim))  # noqa: ML001  # ERROR
""",
    ]

    def check_class(self, cls):
        return ()  # computed by the checker once suppressions are applied
