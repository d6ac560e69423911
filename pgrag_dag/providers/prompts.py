"""Prompt texts sent to the chat model: extraction, gleaning, community reports, query keywords, synthesis.

Every prompt is versioned by its text: the response cache is keyed by the exact messages, so
editing a prompt here invalidates recorded cassettes (re-record them, see corpus/README.md).
The chunk text is always framed by ``<<<CHUNK`` / ``CHUNK>>>`` lines so that a recorded response
can be matched to the chunk it answers.
"""

from __future__ import annotations

ENTITY_TYPES = ("Person", "Organization", "Place", "Event", "Work", "Artifact", "Field", "Concept")

EXTRACT_SYSTEM = (
    """You extract a knowledge graph from one chunk of a document.
Return one JSON object and nothing else:
{"entities": [{"name": str, "type": str, "description": str, "aliases": [str]}],
 "triples": [{"subject": str, "predicate": str, "object": str, "description": str,
              "negated": bool, "confidence": number, "valid_from": str|null, "valid_to": str|null}]}
Rules:
- Entity types: """
    + ", ".join(ENTITY_TYPES)
    + """.
- Name each entity by its fullest proper name in the text; record every other surface form
  (short names, titles, spellings) in "aliases". Never name an entity with a pronoun or a
  relative description ("he", "her father", "the company").
- Emit the stable entity that another document on this subject could name; put periods,
  amounts and changes in the relation and its description, never in an entity name. Before
  emitting a name, ask: could this exact name appear in another document about this subject?
- A triple states a specific relationship the text asserts: predicate in snake_case, past or
  present tense, e.g. "designed", "collaborated_with", "born_in". Two things appearing near each
  other is not a relationship: emit no triple for them. Never use vague predicates such as
  related_to or associated_with.{vocabulary_rule}
- If the text denies a relationship, emit the positive predicate with "negated": true.
- "valid_from"/"valid_to" only when the text states the period, as YYYY, YYYY-MM or YYYY-MM-DD.
- "confidence" in [0, 1]: how plainly the text states the triple.
- Every triple's subject and object must be the name of an entity you listed."""
)

VOCABULARY_RULE = """
- Use one of these predicates whenever one fits the stated relationship; otherwise a precise
  snake_case predicate of your own: {terms}."""

EXTRACT_USER = """Document title: {title}
Source: {source}{context}

<<<CHUNK
{text}
CHUNK>>>"""

GLEAN_USER = """Some entities and triples were missed in the last extraction from this chunk.
Already extracted:
{previous}

Return, in the same JSON format, ONLY the entities and triples that were missed. If nothing was
missed, return {{"entities": [], "triples": []}}.

Document title: {title}
Source: {source}{context}

<<<CHUNK
{text}
CHUNK>>>"""

CONTEXT_LINE = """
Entities already identified in this document (reuse these exact names): {names}"""

REPORT_SYSTEM = """You write a report on one community of a knowledge graph: entities and the
relations among them. Return one JSON object and nothing else:
{"title": str, "summary": str, "findings": [{"summary": str, "explanation": str}], "rating": number}
"rating" is the community's importance to the corpus, from 0 to 10. Relations marked NOT are
denials: never report them as holding. Use only the facts given."""

PARENT_REPORT_SYSTEM = """You write a report on a topic that groups several communities of a
knowledge graph, from their own reports. Return one JSON object and nothing else:
{"title": str, "summary": str, "findings": [{"summary": str, "explanation": str}], "rating": number}
"rating" is the topic's importance to the corpus, from 0 to 10. Use only the reports given."""

SYNTHESIS_SYSTEM = """You answer a question from retrieved context: community reports, numbered
document passages, entities and relations. Rules:
- A partial answer is better than none: answer what the context supports, and say plainly what
  it does not.
- Answer for the periods the question asks about and no others. When it names no period, answer
  for the most recent period the facts cover.
- When records conflict, the most recent statement holds: prefer the relation with the later
  period or the later passage, and mention the earlier one only as history.
- Relations shown as --[NOT p]--> are denials: they state that p does not hold. [from X],
  [until Y] and [valid X to Y] give when a relation held; [superseded] marks one replaced later.
- Cite the passages you use as [n], with their numbers from the context.
- Do not invent facts that are not in the context."""

SYNTHESIS_USER = """Question: {question}

{context}"""

KEYWORDS_SYSTEM = """You extract search keywords from a question for a knowledge-graph search.
Return one JSON object and nothing else:
{"low_level_keywords": [str], "high_level_keywords": [str]}
- "low_level_keywords": the concrete things the question names: people, organisations, places,
  works, products, identifiers, dates — each as written in the question.
- "high_level_keywords": the themes or concepts the question is about (e.g. "cash flow",
  "influence", "regulation"), a few words each.
Use only what the question says; an empty list when there is nothing of that kind."""

KEYWORDS_USER = """Question: {question}"""

CONTRADICTION_SYSTEM = """You decide whether two statements from a knowledge graph can both hold at the
same time. The later one comes from a later document. Return one JSON object and nothing else:
{"contradicts": bool, "explanation": str}. "contradicts" is true only when both cannot be true at once
(lives_in Paris and, later, lives_in Berlin); two facts that can coexist (wrote one book and wrote
another) do not contradict."""

CONTRADICTION_USER = """Earlier: {earlier}
Later: {later}"""
