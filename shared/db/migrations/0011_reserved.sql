-- Placeholder keeping versions 1..N without gaps on the models branch, whose migration was
-- given number 0015: other branches own 0008-0014. The integrator deletes this file at merge.
SELECT 1;
