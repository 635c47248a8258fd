-- The partitioned detection job (105) reads the reactions by item part,
-- hands each partition's share to the merge through DetectionPartials and
-- keeps two invocations off one partition with leases (JobLeases): its role
-- holds those tables as well.
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE DetectionPartials, JobLeases TO ROLE fn_detect_manipulation;
GRANT SELECT ON TABLE Reactions TO ROLE fn_detect_manipulation;
