"""One module per report section (tables in the seeds' formats, practice, scaling, text
summary); each turns the tidy frame into tables and is registered with the renderer."""
