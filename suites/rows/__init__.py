"""Result rows: the JSON Lines files that runs write, the one reader every consumer goes through,
and the keys that say which rows are one case on one machine, or one scaling computation."""
