DROP FUNCTION monthpart_ddl(text, text, text, text, uuid, uuid, text);
