"""JSON Schema to grammar rules.

Everything that is not recursive is inlined into one rule (so most schemas become a single
automaton); recursive `$ref`s, large definitions used more than once and nested values of
unconstrained JSON become rules of their own. Keywords that cannot be enforced raise
GrammarError naming the keyword, so a schema is never silently weakened.
"""

from grammars.json_schema.builder import schema_to_rules
from grammars.json_schema.core import check_depth, check_text_depth

__all__ = ["check_depth", "check_text_depth", "schema_to_rules"]
