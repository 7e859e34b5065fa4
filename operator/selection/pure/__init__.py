"""Method auto's pure logic: the next step of a selection (`policy`), verifying the method it chose
(`verification`), and the one edit of status.selection both make (`edit`)."""
