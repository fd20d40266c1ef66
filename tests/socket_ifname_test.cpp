// NCCL_SOCKET_IFNAME's choice (harness/socket_ifname.h): the user's value
// wins; a single-host run listens on loopback; a run across hosts on the
// interface whose subnet holds MASTER_ADDR; else NCCL's own choice stands.
#include "harness/socket_ifname.h"

#include <gtest/gtest.h>

namespace ddpbench {
namespace {

TEST(SocketIfname, LoopbackAddressesMapToTheLoopbackInterface) {
  const std::string lo = InterfaceForAddress("127.0.0.1");
  ASSERT_FALSE(lo.empty()) << "this host has no interface holding 127.0.0.1";
  EXPECT_EQ(InterfaceForAddress("localhost"), lo);
  EXPECT_EQ(InterfaceForAddress("127.0.0.5"), lo);  // 127/8 is all loopback
}

TEST(SocketIfname, AddressesNoInterfaceHoldsGiveNone) {
  EXPECT_EQ(InterfaceForAddress("203.0.113.9"), "");  // TEST-NET-3, never local
  EXPECT_EQ(InterfaceForAddress("node-7.cluster"), "");  // not a literal
  EXPECT_EQ(InterfaceForAddress(""), "");
}

TEST(SocketIfname, TheUsersChoiceWins) {
  const SocketIfname s = ChooseSocketIfname("ib0", /*single_host=*/true, "127.0.0.1");
  EXPECT_EQ(s.name, "ib0");
  EXPECT_EQ(s.Describe(), "ib0 (user)");
}

TEST(SocketIfname, SingleHostListensOnLoopback) {
  const std::string lo = InterfaceForAddress("127.0.0.1");
  EXPECT_EQ(ChooseSocketIfname(nullptr, true, "203.0.113.9").Describe(), lo + " (loopback)");
  EXPECT_EQ(ChooseSocketIfname("", true, "127.0.0.1").Describe(), lo + " (loopback)");
}

TEST(SocketIfname, AcrossHostsListensOnMasterAddrsInterface) {
  const std::string lo = InterfaceForAddress("127.0.0.1");
  EXPECT_EQ(ChooseSocketIfname(nullptr, false, "127.0.0.1").Describe(), lo + " (master_addr)");
  const SocketIfname none = ChooseSocketIfname(nullptr, false, "203.0.113.9");
  EXPECT_EQ(none.name, "");
  EXPECT_EQ(none.Describe(), "nccl-default");
}

}  // namespace
}  // namespace ddpbench
