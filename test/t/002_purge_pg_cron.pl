# Retention with the real pg_cron: idem_purge_all scheduled every minute
# removes the expired records, and never a live lease or an unknown outcome.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('purge_cron');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 20
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

$node->safe_psql('postgres', q{
INSERT INTO idempotent_record (key, status, fence, locked_until, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', 1, NULL, now(), now(), now() - interval '1 hour'
  FROM generate_series(1, 2500) i;
INSERT INTO idempotent_record (key, status, fence, locked_until, created_at, updated_at, expires_at) VALUES
    ('fresh',       'succeeded',   1, NULL,                      now(), now(), now() + interval '1 day'),
    ('leased-live', 'in_progress', 1, now() + interval '1 hour', now(), now(), now() - interval '1 hour'),
    ('unknown',     'unknown',     1, NULL,                      now(), now(), now() - interval '1 hour');
});

# the schedule from the README
$node->safe_psql('postgres',
	"SELECT cron.schedule('idempotency-purge', '* * * * *', 'CALL idem_purge_all(1000)')");

# pg_cron 1.4 runs jobs on the minute: wait for the rows to go
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM idempotent_record WHERE key LIKE 'old-%'"),
	'the scheduled purge removed every expired record');
is( $node->safe_psql('postgres', 'SELECT string_agg(key, \',\' ORDER BY key) FROM idempotent_record'),
	'fresh,leased-live,unknown',
	'the unexpired record, the live lease and the unknown outcome stay');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM cron.job_run_details WHERE status = 'succeeded'"),
	'pg_cron reports the job run as succeeded');

$node->stop;
done_testing();
