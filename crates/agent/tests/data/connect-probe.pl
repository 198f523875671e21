# Tries each `host port` pair given as arguments; prints `reached` or `refused` for each
# (a connect that hangs for 3 s counts as refused). Shared by the agent's and the CLI's network tests.
use Socket qw(:all);
while (@ARGV) {
    my ($host, $port) = (shift, shift);
    my $v6 = $host =~ /:/;
    socket(my $s, $v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0) or die "socket: $!";
    my $to = $v6 ? pack_sockaddr_in6($port, inet_pton(AF_INET6, $host)) : pack_sockaddr_in($port, inet_aton($host));
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm 3;
    my $ok = eval { connect($s, $to) };
    alarm 0;
    print(($ok ? "reached" : "refused"), " $host $port\n");
}
