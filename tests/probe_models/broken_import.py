import this_module_does_not_exist_metalint  # noqa: F401
