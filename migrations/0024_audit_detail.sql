-- What an audited call acted on, said (issue 55): the target's salient fields as a JSON object (an
-- added operator's role, a webhook's URL host and topics, a dispatch's session), never a secret. NULL
-- for records from before, and for calls whose route's {id} says it all.
ALTER TABLE audit ADD COLUMN detail TEXT;
