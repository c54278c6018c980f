-- Placeholder keeping versions 1..N without gaps on the notifications branch, whose migration
-- was given number 0011: other branches own 0008-0010. The integrator deletes this file at merge.
SELECT 1;
