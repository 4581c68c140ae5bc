# test/t/IdemTest.pm: what the TAP tests share.  A test loads it with
#     use FindBin;
#     use lib $FindBin::RealBin;
#     use IdemTest;
package IdemTest;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;

our @EXPORT = qw(idem_node psql_verbose end_lease);

# idem_node(NAME, OPTION => VALUE...): a new cluster, started, with the
# extension created in database postgres.  Options:
#   init       => {...}  arguments of PostgreSQL::Test::Cluster::init
#   preload    => [...]  shared_preload_libraries, in this order (the
#                        extension is preloaded only where it is listed)
#   conf       => '...'  more postgresql.conf lines
#   extensions => [...]  extensions created before idempotency
sub idem_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	my $conf = $opt{conf} // '';
	$conf = "shared_preload_libraries = '" . join(', ', @{ $opt{preload} }) . "'\n" . $conf
	  if $opt{preload};
	$node->append_conf('postgresql.conf', $conf) if $conf ne '';
	$node->start;
	$node->safe_psql('postgres',
		join('', map { "CREATE EXTENSION $_;\n" } @{ $opt{extensions} // [] }, 'idempotency'));
	return $node;
}

# psql_verbose(NODE, SQL): (exit status, stdout, stderr) of SQL in database
# postgres, its errors with their SQLSTATE ("ERROR:  IK003: ...")
sub psql_verbose
{
	my ($node, $sql) = @_;
	return $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
}

# end_lease(NODE, KEY...): the leases of the records of KEY (in the default
# scope) end now, by the server's clock, as if their workers had stopped
# extending them.  Tests hold leases long enough to stay live on a busy
# machine, and end them this way instead of waiting for a short one.
sub end_lease
{
	my ($node, @keys) = @_;
	my $list = join(', ', map { "'$_'" } @keys);
	$node->safe_psql('postgres',
		"UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' WHERE scope = '' AND key IN ($list)");
	return;
}

1;
