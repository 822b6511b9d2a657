# a library that refuses to import with a message over several lines, as torchtune does
# without torchao
raise ImportError(
    """
        torchao not installed.
        Please follow the instructions to install it.
        """
)
