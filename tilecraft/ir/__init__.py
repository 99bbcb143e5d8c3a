"""The tile IR: typed values over symbolic block dimensions."""
