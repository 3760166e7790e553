"""The one exception of the data side: bad input, told in a sentence the user can act on."""


class DataError(ValueError):
    """A corpus input, tokenizer or prepared corpus cannot be used.

    The message names the file or directory at fault and says what to do about it. The CLI
    prints it as one line, without a traceback.
    """
