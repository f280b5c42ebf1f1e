"""Result rows: the JSON Lines files that runs write (plain or gzip) and the one reader that
every consumer (report, publish, compare, estimates, resume) goes through."""
