-- MySQL 8: onceflow lists its prepared XA branches with XA RECOVER.
GRANT XA_RECOVER_ADMIN ON *.* TO 'onceflow'@'%';
FLUSH PRIVILEGES;
