"""`kvant eval`: the accuracy gate, a candidate's next-token distributions against a reference's."""
