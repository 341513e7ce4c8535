"""Modal screens: the run form and the help screen."""
